// Command echo is the local cluster's sample backend (image coxswain.dev/echo:dev): it answers
// every request with one line naming its pod and what it received, so a response shows which
// backend a Gateway sent it to. /download?bytes=N&chunk=C&interval=D streams N bytes of the
// pattern byte i = i mod 251, C at a time every D: a long download for the upgrade test.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
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
	mux.HandleFunc("/download", download)
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

// Bounds of /download: a test's long download, not a way to hold the server.
const (
	maxDownload     = 64 << 20
	maxDownloadTime = 2 * time.Minute
)

// download streams the pattern (byte i is i mod 251) paced as its query says.
func download(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	total, err1 := strconv.Atoi(q.Get("bytes"))
	chunk, err2 := strconv.Atoi(cmp.Or(q.Get("chunk"), "16384"))
	interval, err3 := time.ParseDuration(cmp.Or(q.Get("interval"), "0s"))
	if err := errors.Join(err1, err2, err3); err != nil || total < 0 || total > maxDownload || chunk <= 0 || interval < 0 ||
		time.Duration(total/chunk)*interval > maxDownloadTime {
		http.Error(w, fmt.Sprintf("want bytes (at most %d), chunk and interval (at most %s in all): %v", maxDownload, maxDownloadTime, err), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(total))
	buf := make([]byte, chunk)
	rc := http.NewResponseController(w)
	for sent := 0; sent < total; {
		n := min(chunk, total-sent)
		for i := range n {
			buf[i] = byte((sent + i) % 251)
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return
		}
		_ = rc.Flush()
		sent += n
		if sent < total && interval > 0 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(interval):
			}
		}
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
