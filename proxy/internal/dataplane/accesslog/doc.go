// Package accesslog writes the data plane's access log: one JSON object per request (host,
// method, path, status, route, upstream, duration, bytes), encoded without reflection into a
// buffered writer that is flushed on a timer, so logging costs no write system call per request.
package accesslog
