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
	cpuUS    float64
	// cpuRounds holds the CPU time per request of every round; cpuUS is their median.
	cpuRounds []float64
	closed    loadResult
	fixed     loadResult
	errors    int64
	// rssMiB is the resident set at the end of the closed-loop run, peakMiB the highest it
	// reached (VmHWM) over the warm-up, closed-loop and fixed-rate runs, idleMiB the resident
	// set while holding the scenario's idle connections before any load.
	rssMiB, peakMiB, idleMiB float64
	// baseMiB is the resident set before the idle connections were opened.
	baseMiB float64
	load    string
}

// measure starts the proxy, opens the scenario's idle connections, warms it up, runs the
// closed-loop load while reading its CPU time, then the fixed-rate load, and stops the proxy.
func measure(o *options, s scenario, name string, withFixedRate bool) (result, error) {
	r := result{scenario: s.name, proxy: name}
	p, err := startProxy(o, s, name, false)
	if err != nil {
		return r, err
	}
	defer p.stop()
	var idle *idleConns
	if s.idle > 0 {
		if r.baseMiB, _, err = p.memory(); err != nil {
			return r, err
		}
		if idle, err = openIdle(s, s.idle); err != nil {
			return r, err
		}
		defer idle.close()
		time.Sleep(time.Second)
		if r.idleMiB, _, err = p.memory(); err != nil {
			return r, err
		}
	}
	if _, _, err := closedLoop(o, s, o.warmup); err != nil {
		return r, err
	}
	before, err := p.cpuTicks()
	if err != nil {
		return r, err
	}
	lr, out, err := closedLoop(o, s, o.duration)
	if err != nil {
		return r, err
	}
	after, err := p.cpuTicks()
	if err != nil {
		return r, err
	}
	if err := lr.check("closed loop", o.maxErrors, s.body < 100*mib); err != nil {
		return r, fmt.Errorf("%w\n%s", err, out)
	}
	// A tick is 10 ms: a run too short or a proxy too idle to resolve is no measurement.
	if ticks := after - before; ticks < 20 {
		return r, fmt.Errorf("only %d clock ticks of CPU time over the run: not a measurement", ticks)
	}
	r.closed, r.rps, r.errors = lr, lr.rps, lr.errors
	r.cpuUS = float64(after-before) / clockTicks() * 1e6 / lr.requests
	r.cpuRounds = []float64{r.cpuUS}
	if r.load, err = loadAverage(); err != nil {
		return r, err
	}
	if r.rssMiB, _, err = p.memory(); err != nil {
		return r, err
	}
	if withFixedRate {
		if r.fixed, err = fixedRate(o, s, o.duration); err != nil {
			return r, err
		}
		if err := r.fixed.check("fixed rate", o.maxErrors, true); err != nil {
			return r, err
		}
		r.errors += r.fixed.errors
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

// merge folds round r into the result: CPU time per request takes the median of the rounds,
// errors add up, the peak RSS is the highest, and the rest comes from the first round, which
// also ran the fixed-rate load.
func (res *result) merge(r result, first bool) {
	rounds := slices.Concat(res.cpuRounds, r.cpuRounds)
	if first {
		*res = r
	} else {
		res.errors += r.errors
		res.peakMiB = max(res.peakMiB, r.peakMiB)
	}
	res.cpuRounds = rounds
	sorted := slices.Clone(rounds)
	slices.Sort(sorted)
	if n := len(sorted); n%2 == 1 {
		res.cpuUS = sorted[n/2]
	} else {
		res.cpuUS = (sorted[n/2-1] + sorted[n/2]) / 2
	}
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
