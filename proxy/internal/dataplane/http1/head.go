package http1

import (
	"context"
	"errors"
	"strconv"
)

// Field is one header or trailer field as it arrived: its name as sent and its value with the
// optional whitespace around it trimmed. Both are slices of the buffer the head was parsed
// from, valid until that buffer is reused.
type Field struct {
	Name, Value []byte
}

// Limits bound what a parser accepts. Zero values take the defaults.
type Limits struct {
	// MaxHeaderBytes bounds a head, its start line and final empty line included; 431 beyond
	// for a request. DefaultMaxHeaderBytes when zero.
	MaxHeaderBytes int
	// MaxHeaderCount bounds the fields of a head, and of a trailer section; 431 beyond for a
	// request. DefaultMaxHeaderCount when zero.
	MaxHeaderCount int
	// MaxRequestLine bounds a request line; 414 beyond. DefaultMaxRequestLine when zero.
	MaxRequestLine int
}

// Defaults of Limits.
const (
	DefaultMaxHeaderBytes = 32 << 10
	DefaultMaxHeaderCount = 100
	DefaultMaxRequestLine = 8 << 10
)

// ErrIncomplete says the bytes given hold no whole head, or chunk line, yet: more must be read
// (unless a limit was reached, which is an *Error instead).
var ErrIncomplete = errors.New("http1: incomplete message head")

// Error is a refused message: the status a server answers a request with, and a reason code
// (snake_case, stable: it reaches the access log and the metrics and is the allow-list key of
// the differential tests).
type Error struct {
	Status int
	Reason string
}

func (e *Error) Error() string {
	return "http1: " + strconv.Itoa(e.Status) + " " + e.Reason
}

// ClientWatch tells whether the client of a request is gone, for code that waits on its behalf
// (the upstream client waiting for a backend's answer) and has no read of the client's own to
// notice. The native server puts one in every request's context; ClientGone also cancels that
// context when it finds the client gone.
type ClientWatch interface {
	ClientGone() bool
}

type clientWatchKey struct{}

// WithClientWatch returns ctx carrying w.
func WithClientWatch(ctx context.Context, w ClientWatch) context.Context {
	return context.WithValue(ctx, clientWatchKey{}, w)
}

// ClientWatchOf returns the ClientWatch in ctx, nil when there is none (the nethttp engine,
// HTTP/2).
func ClientWatchOf(ctx context.Context) ClientWatch {
	w, _ := ctx.Value(clientWatchKey{}).(ClientWatch)
	return w
}
