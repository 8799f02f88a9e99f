package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/go-logr/logr"
)

// DefaultAddress is the admin port's default: the loopback only, reached with
// kubectl port-forward.
const DefaultAddress = "127.0.0.1:9901"

// Timeouts and bounds of the admin server. The write timeout lets a CPU profile of up to
// WriteTimeout less a second run (pprof refuses a longer one); nothing else takes long.
const (
	ReadHeaderTimeout = 5 * time.Second
	ReadTimeout       = 10 * time.Second
	WriteTimeout      = 2 * time.Minute
	IdleTimeout       = 30 * time.Second
	MaxHeaderBytes    = 8 << 10
)

// Options configure the admin server.
type Options struct {
	// Address is where it listens. Off the loopback it needs TokenFile (see CheckAddress).
	Address string
	// TokenFile, when set, holds the bearer token every request must carry, on any address.
	TokenFile string
	// Pprof serves the Go runtime profiles under /debug/pprof/.
	Pprof bool
	// Applied returns what the data plane serves (Recorder.Applied).
	Applied func() *Applied
	Log     logr.Logger
}

// Server is the admin port, listening. Serve it, then Shutdown or Close it.
type Server struct {
	lis net.Listener
	srv *http.Server
}

// Listen checks o and binds its address. It refuses an address off the loopback without a token
// file, and a token file that is missing, empty or too short, so that a mistake stops the proxy
// at start rather than leave its admin port open or useless.
func Listen(ctx context.Context, o Options) (*Server, error) {
	guarded := o.TokenFile != ""
	if err := CheckAddress(o.Address, guarded); err != nil {
		return nil, err
	}
	if guarded {
		if _, err := tokenFile(o.TokenFile).read(); err != nil {
			return nil, err
		}
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.Address)
	if err != nil {
		return nil, fmt.Errorf("listen on admin address %s: %w (another address with --admin-address, or empty to turn the admin port off)", o.Address, err)
	}
	// "localhost" passed CheckAddress by name: what it resolved to decides.
	if addr, ok := lis.Addr().(*net.TCPAddr); !guarded && (!ok || !addr.IP.IsLoopback()) {
		_ = lis.Close()
		return nil, fmt.Errorf("admin address %q bound %s: %w", o.Address, lis.Addr(), ErrNotLoopback)
	}
	return &Server{lis: lis, srv: &http.Server{
		Handler:           newHandler(o),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.lis.Addr() }

// Serve serves until Shutdown or Close, and returns http.ErrServerClosed then.
func (s *Server) Serve() error { return s.srv.Serve(s.lis) }

// Shutdown stops the server, waiting for its requests until ctx ends, and then closes it.
func (s *Server) Shutdown(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		return errors.Join(err, s.srv.Close())
	}
	return nil
}

// handler guards and serves the admin endpoints.
type handler struct {
	o     Options
	token tokenFile
	mux   *http.ServeMux
}

func newHandler(o Options) *handler {
	h := &handler{o: o, token: tokenFile(o.TokenFile), mux: http.NewServeMux()}
	h.mux.HandleFunc("/{$}", h.index)
	h.mux.HandleFunc("/snapshot", h.snapshot)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: GET / lists them")
	})
	if o.Pprof {
		h.mux.HandleFunc("/debug/pprof/", pprof.Index)
		h.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		h.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		h.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		h.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return h
}

// ServeHTTP authenticates the request (the token when there is one, else a local Host), then
// allows only GET and HEAD without a body, and serves the endpoint.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if !h.allowed(w, r) {
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "the admin port is read-only: GET and HEAD only")
		return
	}
	if r.ContentLength != 0 {
		writeError(w, http.StatusRequestEntityTooLarge, "the admin endpoints take no request body")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// allowed answers a request that may not go on, and reports whether it may.
func (h *handler) allowed(w http.ResponseWriter, r *http.Request) bool {
	if h.token == "" {
		if localHost(r) {
			return true
		}
		h.o.Log.V(1).Info("Refused admin request", "remoteAddress", r.RemoteAddr, "reason", "Host is not local")
		writeError(w, http.StatusForbidden, "without a token, the Host of a request must be localhost or an IP address")
		return false
	}
	ok, err := h.token.authorized(r)
	if err != nil {
		h.o.Log.Info("Refused admin request: the token file is unusable", "error", err.Error())
		writeError(w, http.StatusServiceUnavailable, "the admin token file is unusable; the proxy's log says why")
		return false
	}
	if !ok {
		h.o.Log.V(1).Info("Refused admin request", "remoteAddress", r.RemoteAddr, "reason", "no valid bearer token")
		w.Header().Set("WWW-Authenticate", `Bearer realm="coxswain-proxy-admin"`)
		writeError(w, http.StatusUnauthorized, "a bearer token is required")
	}
	return ok
}

// endpoint is one line of the index.
type endpoint struct {
	Path        string `json:"path"`
	Description string `json:"description"`
}

func (h *handler) index(w http.ResponseWriter, _ *http.Request) {
	list := []endpoint{
		{"/snapshot", "the applied snapshot: version, content hash, when applied, and every resource in protojson, private keys redacted"},
		{"/snapshot?resource=<key>", "the same with one resource, by its key (listener/<namespace>/<gateway>/<port>, cluster/<namespace>/<service>:<port>, certificate/<namespace>/<secret>)"},
	}
	if h.o.Pprof {
		list = append(list, endpoint{"/debug/pprof/", "Go runtime profiles (go tool pprof)"})
	}
	writeJSON(w, http.StatusOK, struct {
		Endpoints []endpoint `json:"endpoints"`
	}{list})
}

func (h *handler) snapshot(w http.ResponseWriter, r *http.Request) {
	a := h.o.Applied()
	if a == nil {
		writeError(w, http.StatusServiceUnavailable, "no snapshot applied yet")
		return
	}
	body, err := renderSnapshot(a, r.URL.Query().Get("resource"))
	switch {
	case errors.Is(err, errNoSuchResource):
		writeError(w, http.StatusNotFound, err.Error())
	case err != nil:
		h.o.Log.Info("Could not render the applied snapshot", "version", a.Set.Version(), "error", err.Error())
		writeError(w, http.StatusInternalServerError, "could not render the applied snapshot; the proxy's log says why")
	default:
		writeBody(w, http.StatusOK, body)
	}
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, struct {
		Error string `json:"error"`
	}{msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("admin: encode %T: %v", v, err)) // plain structs of strings always encode
	}
	writeBody(w, code, body)
}

func writeBody(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}
