package containerlog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// maxLine is the longest content of one entry; a longer line is split into partial entries,
// as container runtimes do.
const maxLine = 16 * 1024

// Stream names the two outputs of a container.
type Stream string

// The streams of a container.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// File is the log of one run of a container, written by its two streams. Each line gets the
// time it arrived.
type File struct {
	mu      sync.Mutex
	f       *os.File
	now     func() time.Time
	streams []*writer
	err     error
}

// Create opens path for appending (a run retried after a failed start appends to its file).
func Create(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) //nolint:gosec // the agent's own directory
	if err != nil {
		return nil, fmt.Errorf("open container log: %w", err)
	}
	return &File{f: f, now: time.Now}, nil
}

// Writer returns the writer of one stream. It buffers an incomplete line until its end
// arrives, the line grows past 16 KiB, or the file is closed.
func (f *File) Writer(s Stream) io.Writer {
	w := &writer{file: f, stream: s}
	f.mu.Lock()
	f.streams = append(f.streams, w)
	f.mu.Unlock()
	return w
}

// Close writes what is left of incomplete lines and closes the file.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.streams {
		if len(w.buf) > 0 {
			f.entry(w.stream, 'F', w.buf)
			w.buf = nil
		}
	}
	return errors.Join(f.err, f.f.Close())
}

// entry writes one entry; the caller holds f.mu. A write error is kept for Close: the
// container must not fail because its log could not be written.
func (f *File) entry(s Stream, tag byte, content []byte) {
	line := make([]byte, 0, len(content)+64)
	line = f.now().UTC().AppendFormat(line, time.RFC3339Nano)
	line = append(line, ' ')
	line = append(line, s...)
	line = append(line, ' ', tag, ' ')
	line = append(line, content...)
	line = append(line, '\n')
	if _, err := f.f.Write(line); err != nil && f.err == nil {
		f.err = fmt.Errorf("write container log: %w", err)
	}
}

type writer struct {
	file   *File
	stream Stream
	buf    []byte
}

func (w *writer) Write(p []byte) (int, error) {
	f := w.file
	f.mu.Lock()
	defer f.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		switch {
		case i >= 0 && i <= maxLine:
			f.entry(w.stream, 'F', w.buf[:i])
			w.buf = w.buf[i+1:]
		case len(w.buf) > maxLine:
			f.entry(w.stream, 'P', w.buf[:maxLine])
			w.buf = w.buf[maxLine:]
		default:
			w.buf = append([]byte(nil), w.buf...) // let the consumed prefix go
			return len(p), nil
		}
	}
}
