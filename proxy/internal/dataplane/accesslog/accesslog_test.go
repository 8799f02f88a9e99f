package accesslog_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"coxswain.dev/coxswain/proxy/internal/dataplane/accesslog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Tests that an entry is one valid JSON line with every field, escaping what JSON needs.
func TestAppendWritesOneJSONLine(t *testing.T) {
	t.Parallel()
	e := &accesslog.Entry{
		Start: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Duration: 1500 * time.Microsecond,
		Protocol: "HTTP/1.1", Host: "a.example.com", Method: "GET", Path: "/q\"uote\\\n\xff",
		Status: 200, Route: "ns/r/0/0", Upstream: "10.0.0.1:80", Bytes: 42,
	}
	line := accesslog.Append(nil, e)
	if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
		t.Fatalf("not one line: %q", line)
	}
	var got map[string]any
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatalf("invalid JSON %s: %v", line, err)
	}
	want := map[string]any{
		"time": "2025-01-02T03:04:05Z", "protocol": "HTTP/1.1", "host": "a.example.com", "method": "GET",
		"path": "/q\"uote\\\n\ufffd", "status": 200.0, "route": "ns/r/0/0", "upstream": "10.0.0.1:80",
		"durationMs": 1.5, "bytes": 42.0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entry (-want +got):\n%s", diff)
	}
}

// Tests that Close flushes what was logged.
func TestCloseFlushes(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := accesslog.New(&buf, time.Hour)
	l.Log(&accesslog.Entry{Status: 204})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"status":204`)) {
		t.Errorf("flushed %q", buf.String())
	}
}

func BenchmarkLog(b *testing.B) {
	var buf bytes.Buffer
	l := accesslog.New(&buf, time.Hour)
	defer l.Close()
	e := &accesslog.Entry{Start: time.Now(), Host: "a.example.com", Method: "GET", Path: "/api/v1/items", Status: 200, Route: "ns/r/0/0", Upstream: "10.0.0.1:80", Bytes: 100}
	b.ReportAllocs()
	for b.Loop() {
		l.Log(e)
		if buf.Len() > 1<<20 {
			buf.Reset()
		}
	}
}
