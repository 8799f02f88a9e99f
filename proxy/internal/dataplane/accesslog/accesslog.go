package accesslog

import (
	"bufio"
	"io"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Entry is one request.
type Entry struct {
	Start    time.Time
	Duration time.Duration
	Protocol string
	Host     string
	Method   string
	Path     string
	Status   int
	// Route is the matched route's name, empty when none matched.
	Route string
	// Upstream is the endpoint address the request went to, empty when none.
	Upstream string
	// Bytes is the size of the response body.
	Bytes int
	// Reason says why the proxy chose the status (a refused request, a breached limit, a failed
	// exchange); empty when the backend answered.
	Reason string
}

// Logger writes entries as JSON lines. It is safe for concurrent use.
type Logger struct {
	mu   sync.Mutex
	w    *bufio.Writer
	bufs sync.Pool
	stop chan struct{}
	done chan struct{}
}

// New returns a logger writing to w, flushing at least every interval (one second when zero).
func New(w io.Writer, interval time.Duration) *Logger {
	if interval <= 0 {
		interval = time.Second
	}
	l := &Logger{
		w:    bufio.NewWriterSize(w, 64<<10),
		bufs: sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }},
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	go l.flushEvery(interval)
	return l
}

func (l *Logger) flushEvery(interval time.Duration) {
	defer close(l.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.mu.Lock()
			_ = l.w.Flush()
			l.mu.Unlock()
		case <-l.stop:
			return
		}
	}
}

// Log writes one entry. Write errors are dropped: the access log never fails a request.
func (l *Logger) Log(e *Entry) {
	bp := l.bufs.Get().(*[]byte)
	b := Append((*bp)[:0], e)
	l.mu.Lock()
	_, _ = l.w.Write(b)
	l.mu.Unlock()
	*bp = b
	l.bufs.Put(bp)
}

// Close stops the flusher and flushes what is buffered.
func (l *Logger) Close() error {
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Flush()
}

// Append appends e as one JSON line.
func Append(b []byte, e *Entry) []byte {
	b = append(b, `{"time":"`...)
	b = e.Start.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	b = appendField(b, "protocol", e.Protocol)
	b = appendField(b, "host", e.Host)
	b = appendField(b, "method", e.Method)
	b = appendField(b, "path", e.Path)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = appendField(b, "route", e.Route)
	b = appendField(b, "upstream", e.Upstream)
	b = append(b, `,"durationMs":`...)
	b = strconv.AppendFloat(b, float64(e.Duration.Microseconds())/1000, 'f', 3, 64)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, int64(e.Bytes), 10)
	if e.Reason != "" {
		b = appendField(b, "reason", e.Reason)
	}
	return append(b, "}\n"...)
}

func appendField(b []byte, name, value string) []byte {
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, `":`...)
	return appendString(b, value)
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string, escaping quotes, backslashes and control
// characters and replacing invalid UTF-8.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < ' ':
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
		i++
	}
	return append(b, '"')
}
