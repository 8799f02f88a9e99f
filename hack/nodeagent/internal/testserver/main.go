// Command testserver is the node agent test's workload: an HTTP server that reports what its
// pod sees (a file's content, an environment variable, its process id and user, another address, over
// HTTPS with the roots of a given CA file, a DNS name), answers datagrams with its hostname,
// writes what it is asked to its stdout or stderr, exits when asked and, by flag,
// misbehaves: exits early, fails its health check, or ignores SIGTERM.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	addr := flag.String("listen", ":8080", "listen address")
	exitAfter := flag.Duration("exit-after", 0, "exit this long after the start (0: never)")
	exitCode := flag.Int("exit-code", 3, "exit code of -exit-after")
	failAfter := flag.Duration("fail-healthz-after", 0, "answer /healthz with 500 this long after the start (0: never)")
	ignoreTerm := flag.Bool("ignore-sigterm", false, "keep serving on SIGTERM")
	probe := flag.String("get", "", "GET this URL and exit 0 on a 2xx answer, 1 otherwise, instead of serving (an exec probe)")
	udp := flag.String("udp", "", "also answer each datagram on this address with the hostname")
	flag.Parse()
	if *probe != "" {
		os.Exit(get(*probe))
	}
	start := time.Now()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if *failAfter > 0 && time.Since(start) > *failAfter {
			http.Error(w, "failing on purpose", http.StatusInternalServerError)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/pid", func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprint(w, strconv.Itoa(os.Getpid())) })
	mux.HandleFunc("/id", func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprintf(w, "%d:%d", os.Getuid(), os.Getgid()) })
	mux.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprint(w, os.Getenv(r.URL.Query().Get("name")))
	})
	mux.HandleFunc("/file", func(w http.ResponseWriter, r *http.Request) {
		data, err := os.ReadFile(r.URL.Query().Get("path"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		_, _ = w.Write(data)
	})
	mux.HandleFunc("/fetch", func(w http.ResponseWriter, r *http.Request) {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, r.URL.Query().Get("url"), http.NoBody)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		client := &http.Client{Timeout: 5 * time.Second}
		if ca := r.URL.Query().Get("ca"); ca != "" { // trust only the roots of this file
			pem, err := os.ReadFile(ca)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(pem)
			client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
		}
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(w, resp.Body)
	})
	mux.HandleFunc("/resolve", resolve)
	mux.HandleFunc("/exit", func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(r.URL.Query().Get("code"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		time.AfterFunc(100*time.Millisecond, func() { os.Exit(code) })
	})
	mux.HandleFunc("/log", func(w http.ResponseWriter, r *http.Request) {
		out := os.Stdout
		if r.URL.Query().Get("stream") == "stderr" {
			out = os.Stderr
		}
		_, _ = fmt.Fprint(out, r.URL.Query().Get("text"))
	})
	mux.HandleFunc("/write", func(w http.ResponseWriter, r *http.Request) {
		if err := os.WriteFile(r.URL.Query().Get("path"), []byte(r.URL.Query().Get("data")), 0o600); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	if *udp != "" {
		if err := serveUDP(*udp); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if *exitAfter > 0 {
		time.AfterFunc(*exitAfter, func() { os.Exit(*exitCode) })
	}
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	signals := []os.Signal{syscall.SIGTERM, syscall.SIGINT}
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
		signals = signals[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), signals...)
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	err := srv.ListenAndServe()
	stop()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// resolve looks a name up through the pod's /etc/resolv.conf (the pure-Go resolver of a
// static binary): its A records, or with type=SRV its SRV targets and ports, sorted and one a
// line. An unknown name answers 404 NXDOMAIN, another failure 502.
func resolve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var answers []string
	var err error
	if q.Get("type") == "SRV" {
		var srvs []*net.SRV
		_, srvs, err = net.DefaultResolver.LookupSRV(r.Context(), "", "", q.Get("name"))
		for _, s := range srvs {
			answers = append(answers, fmt.Sprintf("%s:%d", s.Target, s.Port))
		}
	} else {
		answers, err = net.DefaultResolver.LookupHost(r.Context(), q.Get("name"))
	}
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		http.Error(w, "NXDOMAIN", http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	slices.Sort(answers)
	_, _ = fmt.Fprint(w, strings.Join(answers, "\n"))
}

func get(url string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		fmt.Fprintln(os.Stderr, resp.Status)
		return 1
	}
	return 0
}

// serveUDP answers each datagram on addr with the hostname (the pod's name), in the background.
func serveUDP(addr string) error {
	conn, err := net.ListenPacket("udp", addr) //nolint:noctx // lives as long as the process
	if err != nil {
		return err
	}
	name, _ := os.Hostname()
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = conn.WriteTo([]byte(name), from)
		}
	}()
	return nil
}
