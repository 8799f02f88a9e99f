package stream

import (
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"coxswain.dev/coxswain/discovery/printable"
	"coxswain.dev/coxswain/discovery/server/cache"
)

// Tests that Proxies follows what each live stream's proxy answered, that OnAnswer hears of
// every answer and of streams opening and closing, and that a later ACK clears a NACK.
func TestProxiesReportWhatEachStreamAnswered(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	heard := map[cache.Scope]int{}
	e := newEnv(t, func(c *Config) {
		c.OnAnswer = func(s cache.Scope) {
			mu.Lock()
			defer mu.Unlock()
			heard[s]++
		}
	})
	heardOf := func(s cache.Scope) int {
		mu.Lock()
		defer mu.Unlock()
		return heard[s]
	}
	pool := cache.SharedPool()
	a := e.subscribe(t, sharedID, "a", pool)
	b := e.subscribe(t, sharedID, "b", pool)
	first := a.mustRecv()
	b.mustRecv()
	waitFor(t, "both streams listed with their snapshot in flight", func() bool {
		ps := e.srv.Proxies(pool)
		return len(ps) == 2 && ps[0].InFlight == first.GetVersion() && ps[1].InFlight == first.GetVersion()
	})
	if got := e.srv.Proxies(pool); got[0].Answered() || got[1].Answered() {
		t.Errorf("streams that answered nothing report %+v", got)
	}
	a.ack(first)

	e.set(t, pool, map[string]string{"listener": "v2"})
	delta := a.mustRecv()
	a.nack(delta, "route table did not validate: "+strings.Repeat("é", maxAnswerDetail))
	waitFor(t, "a's NACK", func() bool { return e.srv.Proxies(pool)[0].Nacked != "" })
	got := e.srv.Proxies(pool)[0]
	want := ProxyState{NodeID: "a", SPIFFEID: sharedID, Acked: first.GetVersion(), Nacked: delta.GetVersion()}
	detail := got.NackDetail
	got.NackDetail = ""
	if got.InFlight == delta.GetVersion() { // the full resend may have left already
		got.InFlight = ""
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a after its NACK (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(detail, "route table did not validate: é") || len(detail) > maxAnswerDetail || strings.ContainsRune(detail, '\uFFFD') ||
		!strings.HasSuffix(detail, printable.Ellipsis) {
		t.Errorf("detail kept %q (%d bytes), want a prefix of the proxy's cut at a rune within %d bytes", detail, len(detail), maxAnswerDetail)
	}

	full := a.mustRecv()
	a.ack(full)
	waitFor(t, "a's ACK of the resent full snapshot", func() bool { return e.srv.Proxies(pool)[0].Acked == full.GetVersion() })
	if got := e.srv.Proxies(pool)[0]; got.Nacked != "" || got.NackDetail != "" || got.InFlight != "" {
		t.Errorf("an ACK left %+v", got)
	}

	before := heardOf(pool)
	if before < 5 { // two opens, an ACK, a NACK, an ACK
		t.Errorf("OnAnswer heard %d times of the shared pool, want at least 5", before)
	}
	if err := b.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's stream gone", func() bool { return len(e.srv.Proxies(pool)) == 1 })
	waitFor(t, "OnAnswer told of b leaving", func() bool { return heardOf(pool) > before })
	if got := e.srv.Proxies(webScope); len(got) != 0 {
		t.Errorf("another scope lists %+v", got)
	}
}

// Tests that the detail of a NACK is kept without its control and invisible characters, and cut
// to maxAnswerDetail bytes with an ellipsis: a proxy's text goes into status and events.
func TestNackDetailIsKeptPrintableAndBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pool := cache.SharedPool()
	a := e.subscribe(t, sharedID, "a", pool)
	first := a.mustRecv()
	a.ack(first)
	e.set(t, pool, map[string]string{"listener": "v2"})
	delta := a.mustRecv()
	a.nack(delta, "\x1b[31mSecret tenant/db-password\u202e\r\n"+strings.Repeat("x", 10<<10))
	waitFor(t, "a's NACK", func() bool { return e.srv.Proxies(pool)[0].Nacked != "" })
	detail := e.srv.Proxies(pool)[0].NackDetail
	if !printable.Clean(detail) || len(detail) > maxAnswerDetail || !strings.HasSuffix(detail, printable.Ellipsis) ||
		!strings.HasPrefix(detail, "[31mSecret tenant/db-password  xxx") {
		t.Errorf("detail kept %q (%d bytes), want it without control characters, cut with an ellipsis within %d bytes",
			detail, len(detail), maxAnswerDetail)
	}
}
