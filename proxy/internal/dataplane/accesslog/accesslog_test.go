package accesslog_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"coxswain.dev/coxswain/proxy/internal/dataplane/accesslog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func fullEntry() *accesslog.Entry {
	return &accesslog.Entry{
		Start: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Duration: 1500 * time.Microsecond,
		RequestID: "req-1", ClientAddr: "[2001:db8::9]:41234", Protocol: "HTTP/1.1",
		TLSVersion: tls.VersionTLS13, SNI: "a.example.com",
		Listener: "ns/gw/443", GatewayListener: "https",
		Host: "a.example.com", Method: "GET", Path: "/q\"uote\\\n\xff",
		Route: "ns/r/2/0", Status: 200, Upstream: "10.0.0.1:80", UpstreamStatus: 200, Retries: 1,
		BytesIn: 7, BytesOut: 42, UpstreamConnect: 250 * time.Microsecond, TTFB: time.Millisecond,
	}
}

// Tests that an entry is one valid JSON line with every field, escaping what JSON needs and
// deriving the Gateway, route, rule and client port from the names and address it holds.
func TestAppendWritesOneJSONLine(t *testing.T) {
	t.Parallel()
	line := accesslog.Append(nil, fullEntry())
	if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
		t.Fatalf("not one line: %q", line)
	}
	var got map[string]any
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatalf("invalid JSON %s: %v", line, err)
	}
	want := map[string]any{
		"time": "2025-01-02T03:04:05Z", "requestID": "req-1", "clientAddress": "2001:db8::9", "clientPort": 41234.0,
		"protocol": "HTTP/1.1", "tlsVersion": "TLSv1.3", "sni": "a.example.com", "gateway": "ns/gw", "listener": "https",
		"host": "a.example.com", "method": "GET", "path": "/q\"uote\\\n\ufffd", "route": "ns/r", "rule": "2",
		"status": 200.0, "reason": "", "upstream": "10.0.0.1:80", "upstreamStatus": 200.0, "retries": 1.0,
		"bytesIn": 7.0, "bytesOut": 42.0, "durationMs": 1.5, "upstreamConnectMs": 0.25, "ttfbMs": 1.0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entry (-want +got):\n%s", diff)
	}
	var keys []string
	for k := range strings.SplitSeq(strings.Trim(string(line), "{}\n"), ",\"") {
		keys = append(keys, strings.Trim(strings.SplitN(k, "\":", 2)[0], "\""))
	}
	if diff := cmp.Diff(accesslog.FieldNames(), keys); diff != "" {
		t.Errorf("keys not in field order (-want +got):\n%s", diff)
	}
}

// Tests that what was not measured or did not happen is null, not a zero that could be read as
// a measurement.
func TestAppendWritesNullForWhatDidNotHappen(t *testing.T) {
	t.Parallel()
	line := accesslog.Append(nil, &accesslog.Entry{Status: 431, Reason: "too_many_headers", ClientAddr: "10.0.0.9:5"})
	var got map[string]any
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatalf("invalid JSON %s: %v", line, err)
	}
	for _, k := range []string{"upstreamStatus", "upstreamConnectMs", "ttfbMs"} {
		if v, ok := got[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %t), want null", k, v, ok)
		}
	}
	if got["reason"] != "too_many_headers" || got["clientAddress"] != "10.0.0.9" || got["clientPort"] != 5.0 {
		t.Errorf("line %s", line)
	}
}

// Tests that the text format writes the chosen fields in their order as key=value pairs,
// quoting values a reader would split and marking empty and absent values with "-".
func TestTextFormatWritesChosenFields(t *testing.T) {
	t.Parallel()
	fields, err := accesslog.ParseFields("status, path,requestID,reason,ttfbMs,clientPort")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	l := accesslog.New(&buf, accesslog.Options{Format: accesslog.FormatText, Fields: fields})
	e := fullEntry()
	e.Path = "/a b=c"
	e.TTFB = 0
	l.Log(e)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	want := `status=200 path="/a b=c" requestID=req-1 reason=- ttfbMs=- clientPort=41234` + "\n"
	if got := buf.String(); got != want {
		t.Errorf("line\n got %q\nwant %q", got, want)
	}
}

// Tests that a field list naming an unknown field, or one twice, and an unknown format are
// refused.
func TestParseRefusesUnknownAndRepeatedFields(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"status,nope", "status,status", "status,,path"} {
		if _, err := accesslog.ParseFields(s); err == nil {
			t.Errorf("ParseFields(%q) accepted", s)
		}
	}
	if _, err := accesslog.ParseFormat("xml"); err == nil {
		t.Error("ParseFormat(xml) accepted")
	}
	all, err := accesslog.ParseFields("all")
	if err != nil || len(all) != len(accesslog.FieldNames()) {
		t.Errorf("ParseFields(all) = %v, %v", all, err)
	}
}

// Tests that Close writes and flushes what was logged.
func TestCloseFlushes(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := accesslog.New(&buf, accesslog.Options{FlushInterval: time.Hour})
	l.Log(&accesslog.Entry{Status: 204})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"status":204`)) {
		t.Errorf("flushed %q", buf.String())
	}
}

// blockedWriter blocks every Write until released.
type blockedWriter struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	buf     bytes.Buffer
}

func newBlockedWriter() *blockedWriter {
	return &blockedWriter{entered: make(chan struct{}), release: make(chan struct{})}
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	return w.buf.Write(p)
}

// Tests that a writer that blocks makes Log drop and count the entries the queue cannot hold,
// without Log ever waiting for it, and that the queued ones are written once it goes on.
func TestBlockedWriterDropsAndCounts(t *testing.T) {
	t.Parallel()
	w := newBlockedWriter()
	l := accesslog.New(w, accesslog.Options{QueueSize: 4, FlushInterval: time.Millisecond})
	l.Log(&accesslog.Entry{Status: 200})
	<-w.entered // the writer goroutine is stuck in Write now, holding no queued entry
	start := time.Now()
	for range 1000 {
		l.Log(&accesslog.Entry{Status: 201})
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("1000 Log calls took %v with a blocked writer", took)
	}
	if got := l.Dropped(); got < 1000-4 || got > 1000 {
		t.Errorf("dropped %d of 1000 with a queue of 4", got)
	}
	close(w.release)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(w.buf.String(), "\n"); n < 1 || n > 5 {
		t.Errorf("wrote %d lines, want the first and the queued at most", n)
	}
}

func BenchmarkLog(b *testing.B) {
	l := accesslog.New(io.Discard, accesslog.Options{})
	defer l.Close()
	e := fullEntry()
	b.ReportAllocs()
	for b.Loop() {
		l.Log(e)
	}
}

func BenchmarkAppend(b *testing.B) {
	e := fullEntry()
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = accesslog.Append(buf[:0], e)
	}
}
