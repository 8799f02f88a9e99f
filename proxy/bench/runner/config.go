package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"coxswain.dev/coxswain/proxy/internal/dataplane/snaptest"
)

// startProxy starts one proxy for scenario s, pinned to the proxy CPU with one worker, and
// waits until it listens. With profiling, coxswain also serves its pprof endpoints on
// pprofAddr.
func startProxy(o *options, s scenario, name string, profiling bool) (*proc, error) {
	addr := httpAddr
	if s.tls {
		addr = httpsAddr
	}
	if err := checkPortsFree(httpAddr, httpsAddr, pprofAddr); err != nil {
		return nil, err
	}
	var p *proc
	var err error
	switch name {
	case "nginx":
		p, err = startNginx(o, s)
	case "haproxy":
		p, err = startHaproxy(o)
	case coxswainNative, coxswainNetHTTP, coxswainAccessLog:
		p, err = startCoxswain(o, s, name, profiling)
	case "nethttp-minimal":
		if s.tls {
			return nil, fmt.Errorf("%s serves plain HTTP only", name)
		}
		p, err = start(o, "minimal", o.proxyCPU, []string{"GOMAXPROCS=1"}, filepath.Join(o.bin, "bench-minimal"),
			"-http", httpAddr, "-backend", backendAddr)
	default:
		return nil, fmt.Errorf("unknown proxy %s", name)
	}
	if err != nil {
		return nil, err
	}
	if err := waitPort(p, addr); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// startCoxswain runs the data plane as proxy name says: coxswain-<engine>, with the JSON
// access log written to a file when the name ends in +accesslog.
func startCoxswain(o *options, s scenario, name string, profiling bool) (*proc, error) {
	engine, accessLog := coxswainEngine(name)
	args := []string{
		"-http", httpAddr, "-https", httpsAddr, "-backend", backendAddr, "-routes", strconv.Itoa(s.routes),
		"-http1-engine", engine,
	}
	if s.tls {
		args = append(args, "-cert", filepath.Join(o.work, "cert.pem"), "-key", filepath.Join(o.work, "key.pem"))
	}
	if accessLog {
		args = append(args, "-access-log", filepath.Join(o.work, "access.log"))
	}
	if profiling {
		args = append(args, "-pprof", pprofAddr)
	}
	return start(o, "coxswain-"+engine, o.proxyCPU, []string{"GOMAXPROCS=1"}, filepath.Join(o.bin, "bench-coxswain"), args...)
}

// coxswainEngine returns the HTTP/1.1 engine a coxswain proxy name holds
// (coxswain-<engine>[+accesslog]) and whether its access log is on.
func coxswainEngine(name string) (engine string, accessLog bool) {
	rest := strings.TrimPrefix(name, "coxswain-")
	engine, accessLog = strings.CutSuffix(rest, "+accesslog")
	return engine, accessLog
}

// startNginx configures nginx as a careful operator would: one worker, upstream keep-alive
// with HTTP/1.1 and an empty Connection header, no access log, client keep-alive requests
// raised so connections are not recycled every 1,000 requests, and one server block per
// hostname with one location per route, the same table the data plane gets. Bodies stream as
// the data plane streams them: request bodies unbuffered and unlimited, responses through
// 32 KiB memory buffers and never spilled to temporary files.
func startNginx(o *options, s scenario) (*proc, error) {
	path := filepath.Join(o.work, "nginx.conf")
	if err := os.WriteFile(path, []byte(nginxConfig(o, s)), 0o600); err != nil {
		return nil, err
	}
	return start(o, "nginx", o.proxyCPU, nil, "nginx", "-c", path, "-e", filepath.Join(o.work, "nginx-error.log"))
}

func nginxConfig(o *options, s scenario) string {
	var b strings.Builder
	fmt.Fprintf(&b, `worker_processes 1;
worker_rlimit_nofile 32768;
master_process off;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  keepalive_requests 10000000;
  keepalive_timeout 120s;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  server_names_hash_max_size 65536;
  server_names_hash_bucket_size 128;
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_cache shared:SSL:10m;
  client_max_body_size 0;
  client_body_buffer_size 32k;
  proxy_request_buffering off;
  proxy_buffer_size 32k;
  proxy_buffers 8 32k;
  proxy_max_temp_file_size 0;
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header Host $host;
  proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
  proxy_set_header X-Forwarded-Proto $scheme;
  upstream app {
    server %[2]s;
    keepalive 256;
    keepalive_requests 10000000;
    keepalive_timeout 120s;
  }
`, o.work, backendAddr)
	listen := "listen " + httpAddr + ";"
	if s.tls {
		h2 := ""
		if s.h2 {
			h2 = " http2"
		}
		listen = fmt.Sprintf("listen %s ssl%s; ssl_certificate %s/cert.pem; ssl_certificate_key %s/key.pem;", httpsAddr, h2, o.work, o.work)
	}
	byHost := map[string][]string{}
	var hosts []string
	for i := range s.routes {
		host, path := snaptest.ScaleTarget(i)
		if _, ok := byHost[host]; !ok {
			hosts = append(hosts, host)
		}
		byHost[host] = append(byHost[host], path)
	}
	for _, host := range hosts {
		fmt.Fprintf(&b, "  server { %s server_name %s;\n", listen, host)
		for _, path := range byHost[host] {
			fmt.Fprintf(&b, "    location %s { proxy_pass http://app; }\n", path)
		}
		b.WriteString("  }\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// startHaproxy runs haproxy with one thread, keep-alive both ways and connection reuse.
func startHaproxy(o *options) (*proc, error) {
	cfg := fmt.Sprintf(`global
  nbthread 1
  maxconn 8000
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  option http-keep-alive
  option forwardfor
  http-reuse always
frontend fe
  bind %s
  default_backend be
backend be
  server app %s maxconn 1000
`, httpAddr, backendAddr)
	path := filepath.Join(o.work, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	return start(o, "haproxy", o.proxyCPU, nil, "haproxy", "-db", "-f", path)
}

// writeCertificate writes the self-signed certificate both TLS proxies serve.
func writeCertificate(dir string) error {
	cert, _, err := snaptest.NewCertificate("bench/cert", "bench.example.com")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cert.pem"), cert.GetCertificateChainPem(), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "key.pem"), cert.GetPrivateKeyPem(), 0o600)
}
