package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// profiled is the coxswain proxy profiled where it misses a target: the native engine, the
// one the targets are for (the net/http engine's profiles are in BENCHMARKS.md).
const profiled = coxswainNative

// profileMisses runs the profiled proxy once more in every scenario where it is above target
// with a CPU profile (the closed-loop load, after the warm-up), keeps the profile in
// o.profiles and the top of it in the report.
func profileMisses(o *options, rep *report) error {
	rep.profiles = map[string]string{}
	misses := rep.misses()
	for _, s := range rep.scenarios {
		if len(misses[s.name][profiled]) == 0 {
			continue
		}
		fmt.Fprintf(os.Stderr, "== %s: %s CPU profile\n", s.name, profiled)
		top, err := profileScenario(o, s)
		if err != nil {
			return fmt.Errorf("profile of %q: %w", s.name, err)
		}
		rep.profiles[s.name] = top
	}
	return nil
}

// profileScenario runs the profiled proxy in s with its pprof endpoints on, opens the idle connections
// and warms up as the measurement does, then takes a CPU profile over the closed-loop run.
func profileScenario(o *options, s scenario) (string, error) {
	if err := os.MkdirAll(o.profiles, 0o750); err != nil {
		return "", err
	}
	path, err := filepath.Abs(filepath.Join(o.profiles, "cpu-"+slug(s.name)+".pprof"))
	if err != nil {
		return "", err
	}
	backend, err := startBackend(o, s.body)
	if err != nil {
		return "", err
	}
	defer backend.stop()
	p, err := startProxy(o, s, profiled, true)
	if err != nil {
		return "", err
	}
	defer p.stop()
	if s.idle > 0 {
		idle, err := openIdle(s, s.idle)
		if err != nil {
			return "", err
		}
		defer idle.close()
	}
	if _, _, err := closedLoop(o, s, o.warmup); err != nil {
		return "", err
	}
	secs := max(1, int(o.duration.Seconds())-1)
	fetched := make(chan error, 1)
	go func() { fetched <- fetchProfile(path, secs) }()
	time.Sleep(200 * time.Millisecond)
	if _, _, err := closedLoop(o, s, o.duration); err != nil {
		return "", err
	}
	if err := <-fetched; err != nil {
		return "", err
	}
	bin := filepath.Join(o.bin, "bench-coxswain")
	var text strings.Builder
	for _, view := range [][]string{{"-top", "-nodecount=15"}, {"-top", "-cum", "-nodecount=25"}} {
		//nolint:gosec // the go tool on the profile just written
		out, err := exec.CommandContext(context.Background(), "go", append(append([]string{"tool", "pprof"}, view...), bin, path)...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("go tool pprof: %w: %s", err, out)
		}
		text.Write(out)
		text.WriteString("\n")
	}
	return text.String(), nil
}

// fetchProfile takes a CPU profile of secs seconds from the data plane's pprof endpoint into
// path.
func fetchProfile(path string, secs int) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, secs)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile: %s", resp.Status)
	}
	f, err := os.Create(path) //nolint:gosec // the operator's profile directory
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func slug(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}
