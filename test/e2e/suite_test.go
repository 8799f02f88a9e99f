package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// logTailBytes is how much of each process's log a failed test prints.
const logTailBytes = 64 << 10

// suite is the state the scenarios share: one control plane, the operator, the shared proxy
// and the backend.
type suite struct {
	t        *testing.T // the top-level test: processes live as long as it does
	dir      string
	bins     Binaries
	cluster  *Cluster
	operator *Process
	shared   *proxy
	// gatewayPort is the shared pool's internal port of the Gateway's listener (GatewayPort),
	// known once the Gateway is Programmed.
	gatewayPort int
	backend     *Backend
	bundle      string // trust bundle file
	starts      map[string]int
	failed      []window // the scenarios that failed
	// profile makes the operator and the shared proxy serve runtime profiles (the operator on
	// OperatorPprofPort, a proxy on its health address).
	profile bool
	// metrics makes the operator serve its metrics on OperatorMetricsPort.
	metrics bool
}

// window is when a scenario ran.
type window struct{ from, to time.Time }

// proxy is a running proxy process with its options.
type proxy struct {
	*Process
	opts   ProxyOptions
	health *Health
}

func newSuite(t *testing.T) *suite {
	t.Helper()
	bins, err := BinariesFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{t: t, dir: t.TempDir(), bins: bins, starts: map[string]int{}}
	start := time.Now()
	s.cluster, err = StartCluster(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.cluster.Stop(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("Control plane up in %s", time.Since(start).Round(time.Millisecond))
	return s
}

// start runs a binary of the suite as process name for scenario t; it is killed when the
// top-level test ends, and its log is printed when that test failed.
func (s *suite) start(t *testing.T, name, path string, args, env []string) *Process {
	t.Helper()
	s.starts[name]++
	file := name + ".log"
	if n := s.starts[name]; n > 1 {
		file = fmt.Sprintf("%s-%d.log", name, n)
	}
	p, err := StartProcess(name, filepath.Join(s.dir, file), path, args, env)
	if err != nil {
		t.Fatal(err)
	}
	s.t.Cleanup(func() {
		p.Kill()
		if s.ranDuringFailure(p) {
			s.t.Logf("--- log of %s (%s):\n%s", p.Name, p.LogPath, p.LogTail(logTailBytes))
		}
	})
	return p
}

// startOperator runs the operator as an administrator with SVIDs of ttl.
func (s *suite) startOperator(t *testing.T, ttl time.Duration) *Process {
	t.Helper()
	return s.startOperatorWith(t, OperatorOptions{Kubeconfig: s.cluster.Kubeconfig, SVIDTTL: ttl})
}

// startOperatorWith runs the operator with o.
func (s *suite) startOperatorWith(t *testing.T, o OperatorOptions) *Process {
	t.Helper()
	args := OperatorArgs(o)
	if s.profile {
		args = append(args, "--pprof-bind-address="+loopback(OperatorPprofPort))
	}
	if s.metrics {
		// The last of a repeated flag wins: this replaces OperatorArgs' "0".
		args = append(args, "--metrics-bind-address="+loopback(OperatorMetricsPort), "--metrics-secure=false")
	}
	return s.start(t, "operator", s.bins.Operator, args, []string{"KUBECONFIG=" + o.Kubeconfig})
}

// writeFile writes data to a new file of the suite's directory and returns its path.
func (s *suite) writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(s.dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tokenFile writes a discovery token of ServiceAccount coxswain-system/sa to a file.
func (s *suite) tokenFile(ctx context.Context, t *testing.T, sa string) string {
	t.Helper()
	token, err := s.cluster.ServiceAccountToken(ctx, wellknown.InstallNamespace, sa)
	if err != nil {
		t.Fatal(err)
	}
	return s.writeFile(t, sa+"-"+strings.ReplaceAll(t.Name(), "/", "_")+".token", []byte(token))
}

// startProxy runs a proxy with opts.
func (s *suite) startProxy(t *testing.T, opts ProxyOptions) *proxy {
	t.Helper()
	args := ProxyArgs(opts)
	if s.profile {
		args = append(args, "--pprof")
	}
	p := s.start(t, "proxy-"+opts.NodeID, s.bins.Proxy, args, nil)
	return &proxy{Process: p, opts: opts, health: NewHealth(opts.HealthAddr())}
}

// waitState polls the proxy's /readyz until its body starts with state ("Ready",
// "Degraded") and the code is 200.
func (p *proxy) waitState(ctx context.Context, timeout time.Duration, state string) error {
	return Poll(ctx, timeout, 50*time.Millisecond, func(ctx context.Context) error {
		if err := p.Ended(); err != nil {
			return err
		}
		code, body, err := p.health.Readyz(ctx)
		if err != nil {
			return err
		}
		if code != 200 || !strings.HasPrefix(body, state+":") {
			return fmt.Errorf("readyz %d %q, want 200 %s", code, body, state)
		}
		return nil
	})
}

// needs maps each scenario to the ones it builds on.
type scenario struct {
	name  string
	needs []string
	run   func(*testing.T)
}

// runScenarios runs each scenario as a subtest in order. A scenario whose prerequisite failed
// fails at once and says so, rather than failing again for the same reason.
func (s *suite) runScenarios(scenarios []scenario) {
	passed := map[string]bool{}
	for _, sc := range scenarios {
		start := time.Now()
		passed[sc.name] = s.t.Run(sc.name, func(t *testing.T) {
			for _, n := range sc.needs {
				if !passed[n] {
					t.Fatalf("not run: needs %q, which failed", n)
				}
			}
			sc.run(t)
			t.Logf("Took %s", time.Since(start).Round(time.Millisecond))
		})
		if !passed[sc.name] {
			s.failed = append(s.failed, window{from: start, to: time.Now()})
		}
	}
}

// ranDuringFailure reports whether p ran while a scenario failed, or the suite failed outside
// any scenario: then its log may tell why.
func (s *suite) ranDuringFailure(p *Process) bool {
	if !s.t.Failed() {
		return false
	}
	if len(s.failed) == 0 {
		return true
	}
	for _, w := range s.failed {
		if p.RanDuring(w.from, w.to) {
			return true
		}
	}
	return false
}
