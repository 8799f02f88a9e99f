package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Loopback ports of the benchmark.
const (
	backendAddr = "127.0.0.1:18080"
	httpAddr    = "127.0.0.1:18081"
	httpsAddr   = "127.0.0.1:18443"
	pprofAddr   = "127.0.0.1:18090"
)

var benchAddrs = []string{backendAddr, httpAddr, httpsAddr, pprofAddr}

// proc is a started process.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
}

// start runs name with args pinned to cpu, its output going to a log file in the work dir.
func start(o *options, logName, cpu string, env []string, name string, args ...string) (*proc, error) {
	logPath := filepath.Join(o.work, logName+".log")
	logFile, err := os.Create(logPath) //nolint:gosec // inside the scratch directory
	if err != nil {
		return nil, err
	}
	//nolint:gosec // runs the benchmark tools with the operator's flags
	cmd := exec.CommandContext(context.Background(), "taskset", append([]string{"-c", cpu, name}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	_ = logFile.Close()
	return &proc{name: logName, cmd: cmd, log: logPath}, nil
}

// stop sends SIGTERM and waits up to five seconds, then kills.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// stat returns the fields of /proc/<pid>/stat after the command name, and an error when the
// process is gone or a zombie: an exited process must never pass for one that used no CPU.
func (p *proc) stat() ([]string, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return nil, fmt.Errorf("%s (pid %d) is gone: %w", p.name, p.cmd.Process.Pid, err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(fields) < 13 {
		return nil, fmt.Errorf("short /proc stat: %q", raw)
	}
	if fields[0] == "Z" || fields[0] == "X" {
		logged, _ := os.ReadFile(p.log)
		return nil, fmt.Errorf("%s (pid %d) exited during the run: %s", p.name, p.cmd.Process.Pid, logged)
	}
	return fields, nil
}

// cpuTicks returns the process's user plus system CPU time in clock ticks (all threads).
func (p *proc) cpuTicks() (int64, error) {
	fields, err := p.stat()
	if err != nil {
		return 0, err
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc stat of %s: %v", p.name, fields)
	}
	return utime + stime, nil
}

// memory returns the process's resident set size now (VmRSS) and its peak since it started
// (VmHWM), in MiB. A missing figure is an error, never zero.
func (p *proc) memory() (rss, peak float64, err error) {
	if _, err := p.stat(); err != nil {
		return 0, 0, err
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	kib := func(field string) float64 {
		for line := range strings.Lines(string(raw)) {
			if rest, ok := strings.CutPrefix(line, field+":"); ok {
				kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
				if err == nil {
					return kb
				}
			}
		}
		return 0
	}
	rss, peak = kib("VmRSS")/1024, kib("VmHWM")/1024
	if rss <= 0 || peak <= 0 {
		return 0, 0, fmt.Errorf("no VmRSS/VmHWM for %s (pid %d) in /proc status", p.name, p.cmd.Process.Pid)
	}
	return rss, peak, nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat times.
func clockTicks() float64 {
	out, err := exec.CommandContext(context.Background(), "getconf", "CLK_TCK").Output()
	if err != nil {
		return 100
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || n <= 0 {
		return 100
	}
	return n
}

// waitPort polls addr until it accepts a connection, then checks that the listening socket
// belongs to p: a port some other process holds must not measure that process instead.
func waitPort(p *proc, addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c, err := (&net.Dialer{Timeout: 200 * time.Millisecond}).DialContext(context.Background(), "tcp", addr)
		if err == nil {
			_ = c.Close()
			return ownsListener(p, addr)
		}
		if _, err := p.stat(); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	logged, _ := os.ReadFile(p.log)
	return fmt.Errorf("%s never listened on %s: %s", filepath.Base(p.log), addr, logged)
}

// ownsListener checks that the socket listening on addr is one of p's file descriptors.
func ownsListener(p *proc, addr string) error {
	inodes, err := listenInodes(addr)
	if err != nil {
		return err
	}
	pid := p.cmd.Process.Pid
	if owner := findOwner(inodes, []int{pid}); owner == pid {
		return nil
	}
	return fmt.Errorf("%s is served by %s, not by %s (pid %d)", addr, describeOwner(inodes), p.name, pid)
}

// checkPortsFree fails when another process already listens on one of addrs.
func checkPortsFree(addrs ...string) error {
	var errs []error
	for _, addr := range addrs {
		ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
		if err == nil {
			_ = ln.Close()
			continue
		}
		inodes, _ := listenInodes(addr)
		errs = append(errs, fmt.Errorf("port %s is already taken by %s (%w); stop it before benchmarking", addr, describeOwner(inodes), err))
	}
	return errors.Join(errs...)
}

// listenInodes returns the socket inodes listening on addr's port, on its address or a
// wildcard one, from /proc/net/tcp and tcp6.
func listenInodes(addr string) (map[string]bool, error) {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, _ := strconv.Atoi(portStr)
	want := fmt.Sprintf(":%04X", port)
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(table) //nolint:gosec // one of two fixed /proc paths
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(raw)) {
			f := strings.Fields(line)
			// sl local_address rem_address st ... inode (field 9); st 0A is LISTEN.
			if len(f) > 9 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
				inodes[f[9]] = true
			}
		}
	}
	return inodes, nil
}

// findOwner returns the first of pids (every process when empty) holding one of inodes, or 0.
func findOwner(inodes map[string]bool, pids []int) int {
	if len(inodes) == 0 {
		return 0
	}
	if len(pids) == 0 {
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err != nil {
				continue
			}
			if inode, ok := strings.CutPrefix(link, "socket:["); ok && inodes[strings.TrimSuffix(inode, "]")] {
				return pid
			}
		}
	}
	return 0
}

// describeOwner names the process holding one of inodes, as far as /proc tells.
func describeOwner(inodes map[string]bool) string {
	pid := findOwner(inodes, nil)
	if pid == 0 {
		return "another process"
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(comm)))
}

func startBackend(o *options, body int) (*proc, error) {
	if err := checkPortsFree(benchAddrs...); err != nil {
		return nil, err
	}
	p, err := start(o, "backend", o.loadCPU, []string{"GOMAXPROCS=1"}, filepath.Join(o.bin, "bench-backend"),
		"-addr", backendAddr, "-body", strconv.Itoa(body))
	if err != nil {
		return nil, err
	}
	if err := waitPort(p, backendAddr); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// loadAverage returns /proc/loadavg's 1, 5 and 15 minute figures.
func loadAverage() (string, error) {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "", fmt.Errorf("load average: %w", err)
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "", fmt.Errorf("load average: unexpected /proc/loadavg %q", raw)
	}
	return strings.Join(f[:3], " "), nil
}
