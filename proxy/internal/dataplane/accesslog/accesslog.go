package accesslog

import (
	"bufio"
	"errors"
	"io"
	"sync/atomic"
	"time"
)

// Entry is one request. Zero values mean "not known" or "did not happen": no route matched, no
// backend was asked, nothing was measured.
type Entry struct {
	Start    time.Time
	Duration time.Duration
	// RequestID is the request's ID as the backend received it.
	RequestID string
	// ClientAddr is the client's address and port ("10.0.0.9:41234", "[::1]:41234").
	ClientAddr string
	Protocol   string
	// TLSVersion is the version of the client's TLS connection (tls.VersionTLS13), 0 for
	// plaintext; SNI is the server name its handshake asked for.
	TLSVersion uint16
	SNI        string
	// Listener is the Listener resource the request arrived through ("<namespace>/<gateway>/
	// <port>"), GatewayListener the name of the Gateway listener (section) that served it.
	Listener        string
	GatewayListener string
	Host            string
	Method          string
	Path            string
	// Route is the matched route's name, "<namespace>/<route>/<rule>/<match>"; empty when none
	// matched.
	Route  string
	Status int
	// Reason says why the proxy chose the status (a refused request, a breached limit, a failed
	// exchange); empty when the backend answered.
	Reason string
	// Upstream is the endpoint address the request went to last, empty when none;
	// UpstreamStatus the status of the backend's response, 0 when none arrived.
	Upstream       string
	UpstreamStatus int
	// Retries counts the attempts sent after the first.
	Retries int
	// BytesIn is the size of the request body read from the client, BytesOut that of the
	// response body written to it.
	BytesIn, BytesOut int64
	// UpstreamConnect is the time the last attempt took to get a connection to the backend
	// (dial and TLS handshake, or taking a pooled one); TTFB the time from the request's start
	// to the backend's response header. Zero when not measured.
	UpstreamConnect time.Duration
	TTFB            time.Duration
}

// Options configure a Logger; zero values take the defaults.
type Options struct {
	// Format is the line format; JSON when zero.
	Format Format
	// Fields are the fields written, in order; AllFields when nil.
	Fields []Field
	// QueueSize bounds the entries waiting to be written; entries logged while it is full are
	// dropped and counted. DefaultQueueSize when zero.
	QueueSize int
	// FlushInterval is the longest a written line waits in the buffer; one second when zero.
	FlushInterval time.Duration
}

// DefaultQueueSize is the entries that may wait for the writer: about 1.5 MiB of memory, a
// second of a busy proxy's requests.
const DefaultQueueSize = 4096

// closeTimeout bounds the wait of Close for a writer that does not take the last lines.
const closeTimeout = 5 * time.Second

// ErrWriterBlocked is returned by Close when the writer did not take the last lines in time.
var ErrWriterBlocked = errors.New("access log: the writer did not take the last lines in time")

// Logger writes entries from a bounded queue on a goroutine of its own: Log never waits for the
// writer, and when the writer falls behind (a full pipe, a stalled disk) the entries that do
// not fit are dropped and counted. It is safe for concurrent use.
type Logger struct {
	enc     encoder
	queue   chan Entry
	dropped atomic.Uint64
	w       *bufio.Writer
	flush   time.Duration
	stop    chan struct{}
	done    chan struct{}
	err     error
}

// New returns a logger writing to w.
func New(w io.Writer, o Options) *Logger {
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = time.Second
	}
	if o.Fields == nil {
		o.Fields = AllFields()
	}
	l := &Logger{
		enc:   encoder{format: o.Format, fields: append([]Field(nil), o.Fields...)},
		queue: make(chan Entry, o.QueueSize),
		w:     bufio.NewWriterSize(w, 64<<10),
		flush: o.FlushInterval,
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go l.run()
	return l
}

// Log queues one entry, or drops it when the queue is full. It never blocks, and never fails a
// request.
func (l *Logger) Log(e *Entry) {
	select {
	case l.queue <- *e:
	default:
		l.dropped.Add(1)
	}
}

// Dropped returns the number of entries dropped because the queue was full.
func (l *Logger) Dropped() uint64 { return l.dropped.Load() }

// drainInterval is how often the writer takes the queued entries. The writer polls instead of
// waiting on the queue: a waiting receiver would be woken by every Log, a scheduler round trip
// per request, where polling takes a batch at a time. The queue holds DefaultQueueSize entries
// per interval: 400,000 requests a second.
const drainInterval = 10 * time.Millisecond

// run writes queued entries until Close, flushing the buffer at least every flush interval.
func (l *Logger) run() {
	defer close(l.done)
	t := time.NewTicker(min(drainInterval, l.flush))
	defer t.Stop()
	buf := make([]byte, 0, 1024)
	flushed := time.Now()
	for {
		select {
		case now := <-t.C:
			buf = l.writeQueued(buf)
			if l.w.Buffered() > 0 && now.Sub(flushed) >= l.flush {
				_ = l.w.Flush()
				flushed = now
			}
		case <-l.stop:
			l.writeQueued(buf)
			l.err = l.w.Flush()
			return
		}
	}
}

// writeQueued encodes and writes the entries queued now, and returns the encoding buffer.
func (l *Logger) writeQueued(buf []byte) []byte {
	for {
		select {
		case e := <-l.queue:
			buf = l.enc.append(buf[:0], &e)
			_, _ = l.w.Write(buf)
		default:
			return buf
		}
	}
}

// Close writes the entries still queued, flushes and stops the writer. Entries logged after
// Close are dropped. It returns ErrWriterBlocked when the writer does not take them within a
// few seconds, leaving it to finish alone.
func (l *Logger) Close() error {
	close(l.stop)
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-l.done:
		return l.err
	case <-t.C:
		return ErrWriterBlocked
	}
}

// Append appends e as one JSON line of every field.
func Append(b []byte, e *Entry) []byte {
	return (&encoder{fields: AllFields()}).append(b, e)
}
