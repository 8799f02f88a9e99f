package containerlog

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// clock returns a clock that advances a second at every reading, from 2026-01-01T00:00:00Z.
func clock() func() time.Time {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		t = t.Add(time.Second)
		return t
	}
}

// write logs the writes in order, each to its stream, and returns the file's path.
func write(t *testing.T, writes ...[2]string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "0.log")
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	f.now = clock()
	streams := map[string]interface{ Write([]byte) (int, error) }{"stdout": f.Writer(Stdout), "stderr": f.Writer(Stderr)}
	for _, w := range writes {
		if _, err := streams[w[0]].Write([]byte(w[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func read(t *testing.T, path string, o Options) string {
	t.Helper()
	var out bytes.Buffer
	if err := Copy(t.Context(), &out, path, o, func() bool { return false }); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestFileWritesOneEntryPerLineWithItsStream(t *testing.T) {
	t.Parallel()
	path := write(t, [2]string{"stdout", "one\ntw"}, [2]string{"stderr", "err\n"}, [2]string{"stdout", "o\nthree"})
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "2026-01-01T00:00:01Z stdout F one\n" +
		"2026-01-01T00:00:02Z stderr F err\n" +
		"2026-01-01T00:00:03Z stdout F two\n" +
		"2026-01-01T00:00:04Z stdout F three\n"
	if string(data) != want {
		t.Errorf("log file:\n%s\nwant:\n%s", data, want)
	}
}

func TestALineLongerThanTheLimitIsSplitIntoPartialEntries(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", maxLine+10)
	path := write(t, [2]string{"stdout", long + "\nshort\n"})
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], " stdout P ") || !strings.HasSuffix(lines[1], " stdout F xxxxxxxxxx") {
		t.Fatalf("want a partial entry, its end and the next line, got %d lines: %.80q", len(lines), lines)
	}
	if got := read(t, path, Options{Tail: 1}); got != "short\n" {
		t.Errorf("tail 1 = %q", got)
	}
	if got := read(t, path, Options{Tail: 2}); got != long+"\nshort\n" {
		t.Errorf("tail 2 does not join the split line (%d bytes)", len(got))
	}
}

func TestCopySelectsAsThePodsLogParametersSay(t *testing.T) {
	t.Parallel()
	path := write(t, [2]string{"stdout", "a\n"}, [2]string{"stderr", "b\n"}, [2]string{"stdout", "c\n"})
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"all lines without timestamps", Options{Tail: -1}, "a\nb\nc\n"},
		{
			"timestamps prefix each line",
			Options{Tail: -1, Timestamps: true},
			"2026-01-01T00:00:01Z a\n2026-01-01T00:00:02Z b\n2026-01-01T00:00:03Z c\n",
		},
		{"since drops earlier lines", Options{Tail: -1, Since: time.Date(2026, 1, 1, 0, 0, 2, 0, time.UTC)}, "b\nc\n"},
		{"tail keeps the last lines", Options{Tail: 2}, "b\nc\n"},
		{"tail zero keeps nothing", Options{Tail: 0}, ""},
		{"limit bytes cuts the output", Options{Tail: -1, LimitBytes: 3}, "a\nb"},
	} {
		if got := read(t, path, tc.o); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestFollowCopiesLinesWrittenLaterUntilTheRunEnds(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "0.log")
	f, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	out := f.Writer(Stdout)
	if _, err := out.Write([]byte("before\n")); err != nil {
		t.Fatal(err)
	}
	var live atomic.Bool
	live.Store(true)
	var buf syncBuffer
	done := make(chan error, 1)
	go func() { done <- Copy(context.Background(), &buf, path, Options{Tail: -1, Follow: true}, live.Load) }()
	waitFor(t, &buf, "before\n")
	if _, err := out.Write([]byte("after\nlast")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, &buf, "before\nafter\n")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	live.Store(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end after the run ended")
	}
	if got := buf.String(); got != "before\nafter\nlast\n" {
		t.Errorf("followed %q", got)
	}
}

func waitFor(t *testing.T, buf *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for buf.String() != want {
		if time.Now().After(deadline) {
			t.Fatalf("followed %q, want %q", buf.String(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
