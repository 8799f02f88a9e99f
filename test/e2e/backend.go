package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// BackendAddress is where the suite's backends listen: inside BackendNetwork, so EndpointSlices
// may point at it, and local to the namespace, so nothing leaves it.
const BackendAddress = "198.18.0.5"

// Echo is what a Backend answers: who it is and what request reached it.
type Echo struct {
	Backend string      `json:"backend"`
	Host    string      `json:"host"`
	Path    string      `json:"path"`
	Header  http.Header `json:"header"`
}

// Backend is an HTTP server that answers every request with an Echo.
type Backend struct {
	Name string
	Port int32
	srv  *http.Server
}

// StartBackend listens on BackendAddress on a port the kernel picks.
func StartBackend(ctx context.Context, name string) (*Backend, error) {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(BackendAddress, "0"))
	if err != nil {
		return nil, fmt.Errorf("start backend %s: %w", name, err)
	}
	b := &Backend{Name: name, Port: int32(lis.Addr().(*net.TCPAddr).Port)} //nolint:gosec,forcetypeassert // a TCP listener's port
	b.srv = &http.Server{Handler: http.HandlerFunc(b.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = b.srv.Serve(lis) }() // ends with Close
	return b, nil
}

func (b *Backend) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Echo{Backend: b.Name, Host: r.Host, Path: r.URL.Path, Header: r.Header}) // a client that left
}

// Addr returns host:port of the backend.
func (b *Backend) Addr() string { return net.JoinHostPort(BackendAddress, strconv.Itoa(int(b.Port))) }

// Close stops the backend.
func (b *Backend) Close() error { return b.srv.Close() }
