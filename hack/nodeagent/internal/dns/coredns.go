package dns

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
)

// readyPort is where CoreDNS's ready plugin answers on the bridge address: 200 once the
// kubernetes plugin has synced with the API server.
const readyPort = "8181"

// Server runs CoreDNS.
type Server struct {
	// Binary is the CoreDNS binary.
	Binary string
	// Address is where it listens (UDP and TCP port 53): the bridge address.
	Address string
	// Domain is the cluster domain, cluster.local.
	Domain string
	// Kubeconfig is the kubeconfig CoreDNS watches the API server with.
	Kubeconfig string
	// Dir receives the Corefile.
	Dir string
	// Output receives CoreDNS's log; nil discards it.
	Output io.Writer
	Log    logr.Logger
}

// Corefile is the configuration: the cluster domain and the reverse zones, answered by the
// kubernetes plugin; no forward plugin, so a name of another zone is refused.
func (s *Server) Corefile() (string, error) {
	kubeconfig, err := filepath.Abs(s.Kubeconfig)
	if err != nil {
		return "", fmt.Errorf("kubeconfig path: %w", err)
	}
	return fmt.Sprintf(`%[1]s:53 in-addr.arpa:53 ip6.arpa:53 {
    bind %[2]s
    errors
    ready %[3]s
    kubernetes %[1]s in-addr.arpa ip6.arpa {
        kubeconfig %[4]q
    }
}
`, s.Domain, s.Address, net.JoinHostPort(s.Address, readyPort), kubeconfig), nil
}

// Run starts CoreDNS and keeps it running (restarted a second after it exits) until ctx ends;
// it returns once CoreDNS has stopped. It logs when CoreDNS first reports ready.
func (s *Server) Run(ctx context.Context) error {
	corefile, err := s.Corefile()
	if err != nil {
		return err
	}
	path := filepath.Join(s.Dir, "Corefile")
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("create CoreDNS directory: %w", err)
	}
	if err := os.WriteFile(path, []byte(corefile), 0o600); err != nil {
		return fmt.Errorf("write Corefile: %w", err)
	}
	first := true
	for {
		cmd := exec.Command(s.Binary, "-conf", path) //nolint:gosec,noctx // the configured CoreDNS binary; stopped by SIGTERM below
		cmd.Dir = s.Dir
		cmd.Stdout, cmd.Stderr = s.Output, s.Output
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start CoreDNS: %w", err)
		}
		s.Log.Info("Started CoreDNS", "pid", cmd.Process.Pid, "address", s.Address)
		done := make(chan struct{})
		go func() {
			err := cmd.Wait()
			if ctx.Err() == nil {
				s.Log.Error(err, "CoreDNS exited; restarting it")
			}
			close(done)
		}()
		if first {
			go s.waitReady(ctx)
			first = false
		}
		select {
		case <-done:
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// waitReady polls the ready plugin until it answers 200 or ctx ends.
func (s *Server) waitReady(ctx context.Context) {
	url := "http://" + net.JoinHostPort(s.Address, readyPort) + "/ready"
	client := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
		if err != nil {
			return
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.Log.Info("CoreDNS is ready")
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}
