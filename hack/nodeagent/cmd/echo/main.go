// Command echo is the local cluster's sample backend (image coxswain.dev/echo:dev): it answers
// every request with one line naming its pod and what it received, so a response shows which
// backend a Gateway sent it to.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("listen", ":8080", "listen address")
	flag.Parse()
	pod, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if pod == "" {
		pod, _ = os.Hostname()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintf(w, "echo: pod %s in namespace %s got %s %s%s\n", pod, ns, r.Method, r.Host, r.URL.RequestURI())
		// The trace context it was given, for the tests that follow a trace through a proxy.
		if tp := r.Header.Get("Traceparent"); tp != "" {
			_, _ = fmt.Fprintf(w, "traceparent: %s\n", tp)
		}
	})
	if err := serve(&http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// serve serves until SIGTERM or SIGINT, then shuts down within five seconds.
func serve(srv *http.Server) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
