package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// loadResult is what one load run measured.
type loadResult struct {
	// requests completed; for downloads of 1 MiB and more, the bytes read divided by the body
	// size, so the transfers still under way when the run stops count for what they moved.
	requests float64
	// errors: non-2xx responses, socket errors and timeouts.
	errors   int64
	rps      float64
	p50, p99 time.Duration
	// rate actually sent, for fixed-rate runs.
	rate float64
	// detail names the errors, when the tool says.
	detail string
}

// check fails a run that measured nothing or failed too often. Latency may be missing only
// when latency is false (closed-loop 100 MiB downloads, which may complete none in a run).
func (l loadResult) check(tool string, maxErrors float64, latency bool) error {
	if l.requests <= 0 {
		return fmt.Errorf("%s completed no request", tool)
	}
	if latency && l.p99 <= 0 {
		return fmt.Errorf("%s reported no latency", tool)
	}
	if limit := maxErrors * l.requests; float64(l.errors) > limit {
		return fmt.Errorf("%s: %d errors in %.0f requests (more than %.4f%%) %s", tool, l.errors, l.requests, maxErrors*100, l.detail)
	}
	return nil
}

// target returns the URL and Host of the request each run sends: the middle route.
func target(s scenario) (url, host string) {
	host, path := scaleTarget(s.routes / 2)
	if s.tls {
		return "https://" + httpsAddr + path + "/items", host
	}
	return "http://" + httpAddr + path + "/items", host
}

// closedLoop runs the closed-loop load of s for d: 64 requests in flight, wrk over HTTP/1.1
// (64 connections) or h2load over HTTP/2 (16 connections of 4 streams).
func closedLoop(o *options, s scenario, d time.Duration) (loadResult, string, error) {
	if s.h2 {
		return h2load(o, s, d, 0)
	}
	url, host := target(s)
	args := []string{"-c", o.loadCPU, "wrk", "-t1", "-c64", "-d" + seconds(d), "--latency", "--timeout", "120s", "-H", "Host: " + host}
	if s.handshake {
		args = append(args, "-H", "Connection: close")
	}
	if s.upload > 0 {
		script, err := uploadScript(o, s.upload)
		if err != nil {
			return loadResult{}, "", err
		}
		args = append(args, "-s", script)
	}
	args = append(args, url)
	out, err := exec.CommandContext(context.Background(), "taskset", args...).CombinedOutput() //nolint:gosec // the benchmark's own tools
	if err != nil {
		return loadResult{}, string(out), fmt.Errorf("wrk: %w: %s", err, out)
	}
	r, err := parseWrk(string(out), s)
	return r, string(out), err
}

func seconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(d.Round(time.Second).Seconds()))) + "s"
}

// uploadScript writes the wrk script that POSTs a body of size bytes.
func uploadScript(o *options, size int) (string, error) {
	path := filepath.Join(o.work, "upload.lua")
	script := fmt.Sprintf("wrk.method = \"POST\"\nwrk.body = string.rep(\"x\", %d)\nwrk.headers[\"Content-Type\"] = \"application/octet-stream\"\n", size)
	return path, os.WriteFile(path, []byte(script), 0o600)
}

var (
	wrkRequests = regexp.MustCompile(`(\d+) requests in [\d.]+\w+, ([\d.]+)(B|KB|MB|GB|TB) read`)
	wrkRPS      = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkErrors   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkP50      = regexp.MustCompile(`\s50%\s+([\d.]+)(us|ms|s|m|h)\b`)
	wrkP99      = regexp.MustCompile(`\s99%\s+([\d.]+)(us|ms|s|m|h)\b`)
)

func parseWrk(out string, s scenario) (loadResult, error) {
	var r loadResult
	m := wrkRequests.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("wrk printed no request count: %s", out)
	}
	r.requests, _ = strconv.ParseFloat(m[1], 64)
	if s.body >= mib && s.upload == 0 {
		read, _ := strconv.ParseFloat(m[2], 64)
		unit := map[string]float64{"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}[m[3]]
		r.requests = read * unit / float64(s.body)
	}
	if m := wrkRPS.FindStringSubmatch(out); m != nil {
		r.rps, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		r.errors, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := wrkErrors.FindStringSubmatch(out); m != nil {
		for _, v := range m[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			r.errors += n
		}
	}
	r.p50, r.p99 = wrkDuration(wrkP50.FindStringSubmatch(out)), wrkDuration(wrkP99.FindStringSubmatch(out))
	return r, nil
}

func wrkDuration(m []string) time.Duration {
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour}[m[2]]
	return time.Duration(v * float64(unit))
}

// h2load runs h2load over HTTP/2 with TLS: 16 connections of 4 streams each, closed loop when
// rate is 0, else rate requests per second spread over the connections. Latency comes from its
// per-request log.
func h2load(o *options, s scenario, d time.Duration, rate int) (loadResult, string, error) {
	url, host := target(s)
	logPath := filepath.Join(o.work, "h2load.log")
	_ = os.Remove(logPath)
	const clients = 16
	args := []string{
		"-c", o.loadCPU, "h2load", "-t1", "-c" + strconv.Itoa(clients), "-m4", "-D", strconv.Itoa(max(1, int(d.Seconds()))),
		"-H", ":authority: " + host, "--log-file", logPath,
	}
	if rate > 0 {
		args = append(args, "--rps", strconv.Itoa(max(1, rate/clients)))
	}
	args = append(args, url)
	out, err := exec.CommandContext(context.Background(), "taskset", args...).CombinedOutput() //nolint:gosec // the benchmark's own tools
	if err != nil {
		return loadResult{}, string(out), fmt.Errorf("h2load: %w: %s", err, out)
	}
	r, err := parseH2load(string(out), logPath)
	if err == nil && rate > 0 {
		r.rate = r.rps
	}
	return r, string(out), err
}

var (
	h2Requests = regexp.MustCompile(`requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	h2Status   = regexp.MustCompile(`status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
	h2RPS      = regexp.MustCompile(`finished in [\d.]+\w+, ([\d.]+) req/s`)
)

func parseH2load(out, logPath string) (loadResult, error) {
	var r loadResult
	m := h2Requests.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("h2load printed no request count: %s", out)
	}
	done, _ := strconv.ParseInt(m[1], 10, 64)
	r.requests = float64(done)
	for _, v := range m[3:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		r.errors += n
	}
	if m := h2Status.FindStringSubmatch(out); m != nil {
		for _, v := range m[2:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			r.errors += n
		}
	}
	if m := h2RPS.FindStringSubmatch(out); m != nil {
		r.rps, _ = strconv.ParseFloat(m[1], 64)
	}
	// The log holds one line per request: start time, status, microseconds to the end of the
	// response.
	f, err := os.Open(logPath) //nolint:gosec // inside the scratch directory
	if err != nil {
		return r, fmt.Errorf("h2load log: %w", err)
	}
	defer func() { _ = f.Close() }()
	var lat []time.Duration
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		us, err := strconv.ParseInt(fields[2], 10, 64)
		if err == nil {
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
	}
	r.p50, r.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	return r, sc.Err()
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

// fixedRate runs the latency load of s at s.rate requests per second for d: h2load over
// HTTP/2, else vegeta over HTTP/1.1 with up to 64 connections (keep-alive, except in the
// handshake scenario), response bodies read and discarded.
func fixedRate(o *options, s scenario, d time.Duration) (loadResult, error) {
	if s.h2 {
		r, _, err := h2load(o, s, d, s.rate)
		return r, err
	}
	url, host := target(s)
	method := "GET"
	var body string
	if s.upload > 0 {
		method = "POST"
		body = filepath.Join(o.work, "upload.bin")
		if err := os.WriteFile(body, []byte(strings.Repeat("x", s.upload)), 0o600); err != nil {
			return loadResult{}, err
		}
		body = "@" + body + "\n"
	}
	targets := filepath.Join(o.work, "targets.txt")
	if err := os.WriteFile(targets, []byte(method+" "+url+"\nHost: "+host+"\n"+body), 0o600); err != nil {
		return loadResult{}, err
	}
	results := filepath.Join(o.work, "vegeta.bin")
	//nolint:gosec // runs the benchmark tools with the operator's flags
	attack := exec.CommandContext(context.Background(), "taskset", "-c", o.loadCPU, o.vegeta, "attack",
		"-targets", targets, "-rate", strconv.Itoa(s.rate)+"/1s", "-duration", d.String(),
		"-keepalive="+strconv.FormatBool(!s.handshake), "-http2=false", "-insecure", "-workers", "32", "-max-workers", "64",
		"-connections", "64", "-max-body", "0", "-timeout", "60s", "-output", results)
	if out, err := attack.CombinedOutput(); err != nil {
		return loadResult{}, fmt.Errorf("vegeta attack: %w: %s", err, out)
	}
	out, err := exec.CommandContext(context.Background(), o.vegeta, "report", "-type=json", results).Output() //nolint:gosec // the operator's vegeta
	if err != nil {
		return loadResult{}, fmt.Errorf("vegeta report: %w", err)
	}
	var rep struct {
		Latencies   map[string]int64 `json:"latencies"`
		Requests    int64            `json:"requests"`
		Rate        float64          `json:"rate"`
		Throughput  float64          `json:"throughput"`
		StatusCodes map[string]int64 `json:"status_codes"`
		Errors      []string         `json:"errors"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return loadResult{}, fmt.Errorf("vegeta report: %w: %s", err, strings.TrimSpace(string(out)))
	}
	ok := rep.StatusCodes["200"]
	r := loadResult{
		requests: float64(rep.Requests), errors: rep.Requests - ok, rps: rep.Throughput, rate: rep.Rate,
		p50: time.Duration(rep.Latencies["50th"]), p99: time.Duration(rep.Latencies["99th"]),
	}
	r.detail = fmt.Sprintf("status codes %v %s", rep.StatusCodes, strings.Join(rep.Errors, "; "))
	return r, nil
}

// receivedPath is the backend's count of request body bytes read so far (bench/backend's
// ReceivedPath).
const receivedPath = "/.bench/received-bytes"

// backendReceived asks the backend, directly, how many request body bytes it has read.
func backendReceived() (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+backendAddr+receivedPath, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("backend byte count: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64))
	if err != nil {
		return 0, fmt.Errorf("backend byte count: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if resp.StatusCode != http.StatusOK || err != nil {
		return 0, fmt.Errorf("backend byte count: %s %q", resp.Status, raw)
	}
	return n, nil
}
