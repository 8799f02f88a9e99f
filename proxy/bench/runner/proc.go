package main

import (
	"bytes"
	"context"
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
)

// proc is a started process.
type proc struct {
	cmd *exec.Cmd
	log string
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
	return &proc{cmd: cmd, log: logPath}, nil
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

// cpuTicks returns the process's user plus system CPU time in clock ticks (all threads).
func (p *proc) cpuTicks() (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	fields := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc stat: %q", raw)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc stat: %q", raw)
	}
	return utime + stime, nil
}

// rssMiB returns the process's resident set size.
func (p *proc) rssMiB() float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
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

// waitPort polls addr until it accepts a connection.
func waitPort(p *proc, addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c, err := (&net.Dialer{Timeout: 200 * time.Millisecond}).DialContext(context.Background(), "tcp", addr)
		if err == nil {
			_ = c.Close()
			return nil
		}
		if p.cmd.ProcessState != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	logged, _ := os.ReadFile(p.log)
	return fmt.Errorf("%s never listened on %s: %s", filepath.Base(p.log), addr, logged)
}

func startBackend(o *options, body int) (*proc, error) {
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
