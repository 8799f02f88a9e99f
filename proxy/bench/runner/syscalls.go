package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// straceWindow is the longest closed-loop run traced for the system call count (-duration
// when shorter): strace stops the proxy at every call, so a few seconds give thousands of
// requests.
const straceWindow = 5 * time.Second

// syscallCounts are a proxy's system calls per request, counted under strace over a
// closed-loop run.
type syscallCounts struct {
	// requests is the number of requests the traced run completed.
	requests float64
	// writes and reads are the calls per request that write or read data on a socket (write,
	// writev, sendto, sendmsg, sendfile; read, readv, recvfrom, recvmsg), eagain the reads
	// among them that found nothing to read (EAGAIN), other every other call.
	writes, reads, eagain, other float64
	// top names the most frequent other calls, with their count per request.
	top string
}

// total is every call per request.
func (c syscallCounts) total() float64 { return c.writes + c.reads + c.other }

// The system calls that move data, by direction.
var (
	writeCalls = []string{"write", "writev", "pwrite64", "pwritev", "pwritev2", "send", "sendto", "sendmsg", "sendmmsg", "sendfile", "sendfile64"}
	readCalls  = []string{"read", "readv", "pread64", "preadv", "preadv2", "recv", "recvfrom", "recvmsg", "recvmmsg"}
)

// traceSyscalls starts the proxy, warms it up, attaches strace to all its threads, runs the
// closed-loop load for straceWindow, detaches and counts the calls per completed request.
func traceSyscalls(o *options, s scenario, name string) (syscallCounts, error) {
	p, err := startProxy(o, s, name, false)
	if err != nil {
		return syscallCounts{}, err
	}
	defer p.stop()
	if _, _, err := closedLoop(o, s, o.warmup); err != nil {
		return syscallCounts{}, err
	}
	path := filepath.Join(o.work, "strace-"+slug(name)+".txt")
	tr, err := attachStrace(o, p, path)
	if err != nil {
		return syscallCounts{}, err
	}
	lr, out, runErr := closedLoop(o, s, min(o.duration, straceWindow))
	stopErr := tr.stop()
	if err := errors.Join(runErr, stopErr); err != nil {
		return syscallCounts{}, err
	}
	if err := lr.check("closed loop under strace", o.maxErrors, false); err != nil {
		return syscallCounts{}, fmt.Errorf("%w\n%s", err, out)
	}
	if _, err := p.stat(); err != nil {
		return syscallCounts{}, err
	}
	c, err := countSyscalls(path, lr.requests)
	if err != nil {
		return syscallCounts{}, err
	}
	return c, nil
}

// tracer is a running strace attached to a proxy.
type tracer struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// attachStrace starts strace on every thread of p (and those it starts), writing its calls to
// path with their descriptors decoded (-y), and waits until every thread is traced.
func attachStrace(o *options, p *proc, path string) (*tracer, error) {
	logPath := filepath.Join(o.work, "strace.log")
	logFile, err := os.Create(logPath) //nolint:gosec // inside the scratch directory
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }()
	//nolint:gosec // strace on the benchmark's own proxy
	cmd := exec.CommandContext(context.Background(), "strace", "-f", "-qq", "-y", "-e", "signal=none", "-s", "0",
		"-o", path, "-p", strconv.Itoa(p.cmd.Process.Pid))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start strace: %w", err)
	}
	t := &tracer{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		_ = cmd.Wait()
		close(t.done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !tracedBy(p.cmd.Process.Pid, cmd.Process.Pid) {
		select {
		case <-t.done:
			logged, _ := os.ReadFile(logPath) //nolint:gosec // inside the scratch directory
			return nil, fmt.Errorf("strace exited before it traced %s: %s", p.name, logged)
		default:
		}
		if time.Now().After(deadline) {
			_ = t.stop()
			return nil, fmt.Errorf("strace did not trace every thread of %s within 10 s", p.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return t, nil
}

// tracedBy reports whether every thread of pid has tracer as its tracer.
func tracedBy(pid, tracer int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	want := "TracerPid:\t" + strconv.Itoa(tracer) + "\n"
	for _, t := range tasks {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil || !strings.Contains(string(status), want) {
			return false
		}
	}
	return true
}

// stop interrupts strace, which detaches from the proxy and exits, and waits for it.
func (t *tracer) stop() error {
	_ = t.cmd.Process.Signal(os.Interrupt)
	select {
	case <-t.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = t.cmd.Process.Signal(syscall.SIGKILL)
		<-t.done
		return errors.New("strace did not detach within 10 s of its interrupt")
	}
}

// countSyscalls reads strace's output at path and returns the calls per request of requests.
// A trace without a single write to a socket is no measurement.
func countSyscalls(path string, requests float64) (syscallCounts, error) {
	f, err := os.Open(path) //nolint:gosec // inside the scratch directory
	if err != nil {
		return syscallCounts{}, fmt.Errorf("strace output: %w", err)
	}
	defer func() { _ = f.Close() }()
	tally, err := parseStrace(f)
	if err != nil {
		return syscallCounts{}, fmt.Errorf("strace output: %w", err)
	}
	if tally.writes == 0 {
		return syscallCounts{}, fmt.Errorf("strace saw no write to a socket over %.0f requests: not a measurement", requests)
	}
	c := syscallCounts{
		requests: requests,
		writes:   float64(tally.writes) / requests,
		reads:    float64(tally.reads) / requests,
		eagain:   float64(tally.eagain) / requests,
	}
	for _, n := range tally.other {
		c.other += float64(n)
	}
	c.other /= requests
	c.top = topCalls(tally.other, requests, 3)
	return c, nil
}

// straceTally counts the completed calls of a trace: writes and reads of data on sockets,
// the reads among them that returned EAGAIN, and every other call by name (a read or write
// on something else than a socket, such as the Go runtime's eventfd wake-ups, is named with
// "(not a socket)").
type straceTally struct {
	writes, reads, eagain int
	other                 map[string]int
}

// straceCall is the part of a call strace printed when it started: its name and whether its
// first argument is a socket.
type straceCall struct {
	name   string
	socket bool
}

// parseStrace tallies strace -y output. A call another thread interrupted shows as an
// "<unfinished ...>" line, which holds its arguments, and a "<... name resumed>" line with its
// result: it counts once, when it completes.
func parseStrace(r io.Reader) (straceTally, error) {
	t := straceTally{other: map[string]int{}}
	pending := map[string]straceCall{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		tid, line := straceThread(sc.Text())
		if rest, ok := strings.CutSuffix(line, "<unfinished ...>"); ok {
			if call, ok := straceStart(rest); ok {
				pending[tid] = call
			}
			continue
		}
		m := straceResult.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		head, result := m[1], m[2]
		var call straceCall
		if rest, ok := strings.CutPrefix(head, "<... "); ok {
			name, _, _ := strings.Cut(rest, " resumed>")
			call = pending[tid]
			delete(pending, tid)
			if call.name != name {
				call = straceCall{name: name}
			}
		} else {
			var ok bool
			if call, ok = straceStart(head); !ok {
				continue
			}
		}
		t.add(call, result)
	}
	return t, sc.Err()
}

// add counts one completed call with its result.
func (t *straceTally) add(call straceCall, result string) {
	switch {
	case call.socket && slices.Contains(writeCalls, call.name):
		t.writes++
	case call.socket && slices.Contains(readCalls, call.name):
		t.reads++
		if strings.HasPrefix(result, "-1 EAGAIN") {
			t.eagain++
		}
	case slices.Contains(writeCalls, call.name), slices.Contains(readCalls, call.name):
		t.other[call.name+" (not a socket)"]++
	default:
		t.other[call.name]++
	}
}

// straceResult splits a line that ends a call at its result: strace pads the space between
// the closing parenthesis and "=" to align the results.
var straceResult = regexp.MustCompile(`^(.*\))\s+= (.*)$`)

// straceThread splits the thread id strace puts before every line when it follows several.
func straceThread(line string) (tid, rest string) {
	if id, rest, found := strings.Cut(line, " "); found {
		if _, err := strconv.Atoi(id); err == nil {
			return id, strings.TrimLeft(rest, " ")
		}
	}
	return "", line
}

// straceStart returns the name of the call a line starts and whether its first argument is a
// socket (strace -y prints a descriptor as 13<socket:[1849014]>, or 13<TCP:[...]> when it
// decodes the socket), or false for a line that starts no call (a signal, an exit).
func straceStart(line string) (straceCall, bool) {
	name, args, found := strings.Cut(line, "(")
	if !found || name == "" || strings.ContainsAny(name, " -+<") {
		return straceCall{}, false
	}
	first, _, _ := strings.Cut(args, ",")
	_, decor, _ := strings.Cut(first, "<")
	socket := false
	for _, kind := range []string{"socket:", "TCP", "UDP", "UNIX"} {
		socket = socket || strings.HasPrefix(decor, kind)
	}
	return straceCall{name: name, socket: socket}, true
}

// topCalls names the n most frequent calls with their count per request.
func topCalls(calls map[string]int, requests float64, n int) string {
	names := make([]string, 0, len(calls))
	for name := range calls {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(calls[b], calls[a]), cmp.Compare(a, b))
	})
	parts := make([]string, 0, n)
	for _, name := range names[:min(n, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(calls[name])/requests))
	}
	return strings.Join(parts, ", ")
}
