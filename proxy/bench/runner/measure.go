package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"
)

// result is one proxy in one scenario.
type result struct {
	scenario string
	proxy    string
	rps      float64
	// cpuUS is the CPU time per request over the closed-loop run, the median of cpuRounds
	// (one per round); fixedCPUUS the same at the fixed rate, the median of fixedRounds.
	cpuUS, fixedCPUUS      float64
	cpuRounds, fixedRounds []float64
	closed                 loadResult
	fixed                  loadResult
	errors                 int64
	// rssMiB is the resident set at the end of the closed-loop run, peakMiB the highest it
	// reached (VmHWM) over the warm-up, closed-loop and fixed-rate runs.
	rssMiB, peakMiB float64
	// idle is what the scenario's idle connections cost, when it holds some.
	idle idleMemory
	// sys is the proxy's system calls per request, in the scenarios that count them.
	sys  *syscallCounts
	load string
}

// idleMemory is the resident set of a proxy before and while it holds idle keep-alive
// connections: right after they are all open, and idleSettle later.
type idleMemory struct {
	conns                        int
	baseMiB, openMiB, settledMiB float64
}

// perConn returns the growth of the resident set per connection, in KiB, from before the
// connections to mib.
func (m idleMemory) perConn(mib float64) float64 {
	if m.conns == 0 {
		return 0
	}
	return (mib - m.baseMiB) * 1024 / float64(m.conns)
}

// idleSettle is how long after the idle connections are all open the second reading of the
// resident set is taken: past the hot period, when the runtime has had time to return the
// memory it no longer needs. The target is judged on that reading.
const idleSettle = 10 * time.Second

// minTicks is the fewest clock ticks (10 ms each) of proxy CPU time a run must hold to be a
// measurement rather than rounding.
const minTicks = 20

// measure starts the proxy, opens the scenario's idle connections and reads what they cost,
// warms the proxy up, runs the closed-loop load then the fixed-rate load while reading its
// CPU time over each, and stops the proxy.
func measure(o *options, s scenario, name string) (result, error) {
	r := result{scenario: s.name, proxy: name}
	p, err := startProxy(o, s, name, false)
	if err != nil {
		return r, err
	}
	defer p.stop()
	var idle *idleConns
	if s.idle > 0 {
		if idle, r.idle, err = holdIdle(p, s); err != nil {
			return r, err
		}
		defer idle.close()
	}
	if _, _, err := closedLoop(o, s, o.warmup); err != nil {
		return r, err
	}
	if err := r.runClosed(o, s, p); err != nil {
		return r, err
	}
	if r.load, err = loadAverage(); err != nil {
		return r, err
	}
	if r.rssMiB, _, err = p.memory(); err != nil {
		return r, err
	}
	if err := r.runFixed(o, s, p); err != nil {
		return r, err
	}
	if _, r.peakMiB, err = p.memory(); err != nil {
		return r, err
	}
	if idle != nil {
		if lost := idle.lost(); float64(lost) > o.maxErrors*float64(s.idle) {
			return r, fmt.Errorf("%d of %d idle connections were closed during the run", lost, s.idle)
		}
	}
	return r, nil
}

// holdIdle reads the proxy's resident set, opens the scenario's idle connections, and reads it
// again at once and idleSettle after they are all open.
func holdIdle(p *proc, s scenario) (*idleConns, idleMemory, error) {
	m := idleMemory{conns: s.idle}
	var err error
	if m.baseMiB, _, err = p.memory(); err != nil {
		return nil, m, err
	}
	idle, err := openIdle(s, s.idle)
	if err != nil {
		return nil, m, err
	}
	opened := time.Now()
	if m.openMiB, _, err = p.memory(); err != nil {
		idle.close()
		return nil, m, err
	}
	time.Sleep(time.Until(opened.Add(idleSettle)))
	if m.settledMiB, _, err = p.memory(); err != nil {
		idle.close()
		return nil, m, err
	}
	return idle, m, nil
}

// runClosed runs the closed-loop load for -duration and records its CPU time per request;
// uploads of 1 MiB and more count the bytes the backend received over the body size, so the
// transfers still under way when the run stops count for what they moved.
func (res *result) runClosed(o *options, s scenario, p *proc) error {
	var lr loadResult
	var out string
	var received int64
	ticks, err := cpuOver(p, func() error {
		var err error
		if s.upload >= mib {
			if received, err = backendReceived(); err != nil {
				return err
			}
		}
		if lr, out, err = closedLoop(o, s, o.duration); err != nil {
			return err
		}
		if s.upload >= mib {
			after, err := backendReceived()
			if err != nil {
				return err
			}
			lr.requests = float64(after-received) / float64(s.upload)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := lr.check("closed loop", o.maxErrors, s.body < 100*mib && s.upload < 100*mib); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	if ticks < minTicks {
		return fmt.Errorf("only %d clock ticks of CPU time over the closed-loop run: not a measurement", ticks)
	}
	res.closed, res.rps, res.errors = lr, lr.rps, lr.errors
	res.cpuUS = float64(ticks) / clockTicks() * 1e6 / lr.requests
	res.cpuRounds = []float64{res.cpuUS}
	return nil
}

// runFixed runs the fixed-rate load for -duration and records its latency and CPU time per
// completed request: every proxy of a scenario serves the same rate, so their CPU time per
// request compares without the bias of a closed loop, where a faster proxy serves more
// requests per wake-up.
func (res *result) runFixed(o *options, s scenario, p *proc) error {
	var lr loadResult
	ticks, err := cpuOver(p, func() error {
		var err error
		lr, err = fixedRate(o, s, o.duration)
		return err
	})
	if err != nil {
		return err
	}
	if err := lr.check("fixed rate", o.maxErrors, true); err != nil {
		return err
	}
	if ticks < minTicks {
		return fmt.Errorf("only %d clock ticks of CPU time over the fixed-rate run: not a measurement (a longer -duration gives more)", ticks)
	}
	res.fixed = lr
	res.errors += lr.errors
	res.fixedCPUUS = float64(ticks) / clockTicks() * 1e6 / lr.requests
	res.fixedRounds = []float64{res.fixedCPUUS}
	return nil
}

// cpuOver returns the proxy's CPU time, in clock ticks, over run.
func cpuOver(p *proc, run func() error) (int64, error) {
	before, err := p.cpuTicks()
	if err != nil {
		return 0, err
	}
	if err := run(); err != nil {
		return 0, err
	}
	after, err := p.cpuTicks()
	if err != nil {
		return 0, err
	}
	return after - before, nil
}

// merge folds round r into the result: CPU time per request, closed loop and fixed rate,
// takes the median of the rounds, errors add up, the peak RSS is the highest, and the rest
// (latency, idle memory) comes from the first round.
func (res *result) merge(r result, first bool) {
	closed := slices.Concat(res.cpuRounds, r.cpuRounds)
	fixed := slices.Concat(res.fixedRounds, r.fixedRounds)
	if first {
		*res = r
	} else {
		res.errors += r.errors
		res.peakMiB = max(res.peakMiB, r.peakMiB)
	}
	res.cpuRounds, res.fixedRounds = closed, fixed
	res.cpuUS, res.fixedCPUUS = median(closed), median(fixed)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sorted := slices.Clone(v)
	slices.Sort(sorted)
	if n := len(sorted); n%2 == 1 {
		return sorted[n/2]
	}
	n := len(sorted)
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// idleConns are keep-alive connections that each completed one request and then stay idle.
type idleConns struct {
	conns []net.Conn
}

// openIdle opens n connections to the proxy, sends one request on each and reads its response,
// 200 connections at a time.
func openIdle(s scenario, n int) (*idleConns, error) {
	url, host := target(s)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Host = host
	ic := &idleConns{conns: make([]net.Conn, n)}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 200)
	)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := oneRequest(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ic.conns[i] = c
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		ic.close()
		return nil, fmt.Errorf("opening %d idle connections: %d failed, first: %w", n, len(errs), errs[0])
	}
	return ic, nil
}

func oneRequest(req *http.Request) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(context.Background(), "tcp", httpAddr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := req.Write(c); err != nil {
		_ = c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// lost counts the connections the proxy closed: a non-blocking peek that finds end of file,
// data nobody asked for or an error instead of nothing to read.
func (ic *idleConns) lost() int {
	n := 0
	var buf [1]byte
	for _, c := range ic.conns {
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			n++
			continue
		}
		alive := false
		_ = raw.Read(func(fd uintptr) bool {
			_, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			alive = errors.Is(err, syscall.EAGAIN)
			return true
		})
		if !alive {
			n++
		}
	}
	return n
}

func (ic *idleConns) close() {
	for _, c := range ic.conns {
		if c != nil {
			_ = c.Close()
		}
	}
}
