package connlimit

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// refusals records the refused connections of a Listener.
type refusals struct {
	mu  sync.Mutex
	got map[Reason]int
}

func (r *refusals) add(reason Reason, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[reason]++
}

func (r *refusals) count(reason Reason) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[reason]
}

// serve accepts on a loopback Listener with cfg until the test ends and hands out what it accepts.
func serve(t *testing.T, cfg Config) (*Listener, *refusals, <-chan net.Conn) {
	t.Helper()
	raw, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &refusals{got: map[Reason]int{}}
	cfg.Refused = r.add
	l := New(raw, cfg)
	accepted := make(chan net.Conn, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		close(accepted)
		for c := range accepted {
			_ = c.Close()
		}
	})
	return l, r, accepted
}

func dial(t *testing.T, l *Listener, source string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}, Timeout: 5 * time.Second}
	c, err := d.DialContext(t.Context(), "tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Tests that connections beyond a source's share or the total are closed at accept with their
// reason, and that a closed connection gives its slot back.
func TestConnectionsAreCappedPerSourceAndInTotal(t *testing.T) {
	t.Parallel()
	l, r, accepted := serve(t, Config{Max: 3, PerSource: 2})
	dial(t, l, "127.0.0.2")
	dial(t, l, "127.0.0.2")
	dial(t, l, "127.0.0.2")
	waitFor(t, "the third of one source to be refused", func() bool { return r.count(ReasonTooManyFromSource) == 1 })
	dial(t, l, "127.0.0.3")
	dial(t, l, "127.0.0.4")
	waitFor(t, "the fourth in all to be refused", func() bool { return r.count(ReasonTooManyConnections) == 1 })
	if total, fromSource := l.Open("127.0.0.2"); total != 3 || fromSource != 2 {
		t.Fatalf("open = %d, %d from the source; want 3, 2", total, fromSource)
	}
	first := <-accepted
	if l.Lookup(first.LocalAddr(), first.RemoteAddr()) != first {
		t.Error("Lookup does not find an open connection by its addresses")
	}
	_ = first.Close()
	if total, _ := l.Open(""); total != 2 {
		t.Fatalf("open after a close = %d, want 2", total)
	}
	if l.Lookup(first.LocalAddr(), first.RemoteAddr()) != nil {
		t.Error("Lookup finds a closed connection")
	}
}

// Tests that above the soft maximum the first deadline the server sets is held to the busy
// handshake timeout, and that deadlines after the handshake pass through.
func TestTheHandshakeDeadlineIsShorterAboveTheSoftMaximum(t *testing.T) {
	t.Parallel()
	l, _, accepted := serve(t, Config{Max: 4, PerSource: 4, SoftMax: 1, BusyHandshakeTimeout: 100 * time.Millisecond})
	dial(t, l, "127.0.0.2")
	calm := <-accepted
	dial(t, l, "127.0.0.2")
	busy := <-accepted
	for _, c := range []net.Conn{calm, busy} {
		if err := c.SetDeadline(time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_, err := busy.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || time.Since(start) > 5*time.Second {
		t.Fatalf("busy read: %v after %s, want a timeout at the busy deadline", err, time.Since(start))
	}
	if c := calm.(*Conn); !c.handshakeBy.IsZero() {
		t.Error("a connection accepted at the soft maximum got the busy deadline")
	}
	_ = busy.SetDeadline(time.Time{})
	if err := busy.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if c := busy.(*Conn); !c.handshook {
		t.Error("clearing the deadline did not end the handshake")
	}
}

// Tests that a connection without a busy call for the idle timeout is closed, and one whose call
// outlasts it is not.
func TestIdleConnectionsAreClosedUnlessBusy(t *testing.T) {
	t.Parallel()
	l, _, accepted := serve(t, Config{Max: 4, PerSource: 4, IdleTimeout: 100 * time.Millisecond})
	dial(t, l, "127.0.0.2")
	idle := <-accepted
	dial(t, l, "127.0.0.2")
	busy := (<-accepted).(*Conn)
	done := busy.Busy()
	waitFor(t, "the idle connection to close", func() bool { return l.Lookup(idle.LocalAddr(), idle.RemoteAddr()) == nil })
	if l.Lookup(busy.LocalAddr(), busy.RemoteAddr()) == nil {
		t.Fatal("a connection with a call in progress was closed as idle")
	}
	done()
	waitFor(t, "the connection to close once its call ended", func() bool {
		return l.Lookup(busy.LocalAddr(), busy.RemoteAddr()) == nil
	})
}

// Tests that the reserved slots go only to connections that settle verified: a verified
// connection takes a reserved slot, or a common one when none is left; accept takes no more
// than Max+Reserved; an unverified connection when Max have settled into common slots is closed
// and reported, while a verified one still gets the reserved slot a close gave back.
func TestReservedSlotsAreForVerifiedConnections(t *testing.T) {
	t.Parallel()
	l, r, accepted := serve(t, Config{Max: 2, Reserved: 1, PerSource: 8})
	settle := func(verified bool) (*Conn, error) {
		dial(t, l, "127.0.0.2")
		c := (<-accepted).(*Conn)
		return c, c.Settle(verified)
	}
	wantSettled := func(when string, common, reserved int) {
		t.Helper()
		if c, r := l.Settled(); c != common || r != reserved {
			t.Fatalf("settled %s = %d common, %d reserved; want %d, %d", when, c, r, common, reserved)
		}
	}
	first, err := settle(true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := settle(true); err != nil {
		t.Fatal(err)
	}
	wantSettled("with the reserved slot taken", 1, 1)
	if _, err := settle(false); err != nil {
		t.Fatalf("an unverified connection within Max: %v", err)
	}
	dial(t, l, "127.0.0.2")
	waitFor(t, "a connection beyond Max+Reserved to be refused at accept", func() bool {
		return r.count(ReasonTooManyConnections) == 1
	})
	_ = first.Close()
	wantSettled("after a close", 2, 0)
	if _, err := settle(false); !errors.Is(err, ErrUnverifiedOverCap) {
		t.Fatalf("an unverified connection with the common slots taken: %v, want ErrUnverifiedOverCap", err)
	}
	if r.count(ReasonTooManyUnverified) != 1 {
		t.Errorf("refused{TooManyUnverified} = %d, want 1", r.count(ReasonTooManyUnverified))
	}
	verified, err := settle(true)
	if err != nil {
		t.Fatalf("a verified connection with the common slots taken: %v", err)
	}
	if err := verified.Settle(false); err != nil {
		t.Fatalf("settling again: %v", err)
	}
	wantSettled("with every slot taken", 2, 1)
}
