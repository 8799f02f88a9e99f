package containerlog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Options select and shape what Copy writes, as the kubelet's pods/log parameters do.
type Options struct {
	// Since drops entries logged before it; zero keeps all.
	Since time.Time
	// Tail keeps only the last Tail lines of the file; negative keeps all.
	Tail int64
	// LimitBytes stops the output after that many bytes; zero or negative means no limit.
	LimitBytes int64
	// Timestamps prefixes each line with its RFC3339Nano time and a space.
	Timestamps bool
	// Follow keeps copying what is appended to the file while live reports true.
	Follow bool
}

// errLimit ends Copy when LimitBytes were written.
var errLimit = errors.New("byte limit reached")

// pollInterval is how often a followed file is checked for new entries.
const pollInterval = 100 * time.Millisecond

// Copy writes the entries of the log file at path to w as o says. With o.Follow it then waits
// for new entries until live reports false and nothing more is left, or ctx ends. A writer
// that implements Flush (an http.Flusher) is flushed after each batch.
func Copy(ctx context.Context, w io.Writer, path string, o Options, live func() bool) error {
	f, err := os.Open(path) //nolint:gosec // a log file of the agent's own directory
	if err != nil {
		return fmt.Errorf("open container log: %w", err)
	}
	defer f.Close() //nolint:errcheck // read only
	out := &output{w: w, o: o}
	entries, offset, err := readEntries(f, 0)
	if err != nil {
		return err
	}
	if o.Tail >= 0 {
		entries = tail(entries, o.Tail)
	}
	if err := out.write(entries); err != nil {
		return ignoreLimit(err)
	}
	for o.Follow {
		// Read once more after the run ended: its last lines land before it reports done.
		ended := !live()
		var more []entry
		more, offset, err = readEntries(f, offset)
		if err != nil {
			return err
		}
		if err := out.write(more); err != nil {
			return ignoreLimit(err)
		}
		if ended && len(more) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pollInterval):
		}
	}
	return nil
}

func ignoreLimit(err error) error {
	if errors.Is(err, errLimit) {
		return nil
	}
	return err
}

type entry struct {
	time    time.Time
	stamp   []byte
	partial bool
	content []byte
}

// readEntries parses the complete lines from offset on and returns them with the offset after
// the last one; an incomplete last line waits for the next read.
func readEntries(f *os.File, offset int64) ([]entry, int64, error) {
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, offset, fmt.Errorf("read container log: %w", err)
	}
	r := bufio.NewReaderSize(f, 64*1024)
	var entries []entry
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return entries, offset, nil
		}
		if err != nil {
			return nil, offset, fmt.Errorf("read container log: %w", err)
		}
		offset += int64(len(line))
		e, err := parse(line[:len(line)-1])
		if err != nil {
			return nil, offset, err
		}
		entries = append(entries, e)
	}
}

// parse splits `<time> <stream> <F|P> <content>`.
func parse(line []byte) (entry, error) {
	fields := bytes.SplitN(line, []byte(" "), 4)
	if len(fields) < 3 {
		return entry{}, fmt.Errorf("container log entry %q: not `time stream tag content`", line)
	}
	t, err := time.Parse(time.RFC3339Nano, string(fields[0]))
	if err != nil {
		return entry{}, fmt.Errorf("container log entry %q: %w", line, err)
	}
	e := entry{time: t, stamp: fields[0], partial: string(fields[2]) == "P"}
	if len(fields) == 4 {
		e.content = fields[3]
	}
	return e, nil
}

// tail keeps the entries of the last n lines; partial entries belong to the line they start.
func tail(entries []entry, n int64) []entry {
	i := len(entries)
	for lines := int64(0); i > 0; i-- {
		if !entries[i-1].partial {
			if lines == n {
				break
			}
			lines++
		}
	}
	return entries[i:]
}

type output struct {
	w       io.Writer
	o       Options
	written int64
	midLine bool // the last entry written was partial: the next one continues its line
}

func (out *output) write(entries []entry) error {
	var buf []byte
	for _, e := range entries {
		if !out.o.Since.IsZero() && e.time.Before(out.o.Since) {
			continue
		}
		if out.o.Timestamps && !out.midLine {
			buf = append(append(buf, e.stamp...), ' ')
		}
		out.midLine = e.partial
		buf = append(buf, e.content...)
		if !e.partial {
			buf = append(buf, '\n')
		}
	}
	if len(buf) == 0 {
		return nil
	}
	limited := false
	if l := out.o.LimitBytes; l > 0 && out.written+int64(len(buf)) >= l {
		buf, limited = buf[:l-out.written], true
	}
	n, err := out.w.Write(buf)
	out.written += int64(n)
	if err != nil {
		return fmt.Errorf("write logs: %w", err)
	}
	if fl, ok := out.w.(interface{ Flush() }); ok {
		fl.Flush()
	}
	if limited {
		return errLimit
	}
	return nil
}
