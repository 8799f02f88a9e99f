package rebuild

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/stream"
	"coxswain.dev/coxswain/internal/graph"
	"coxswain.dev/coxswain/internal/scopeauth"
	"coxswain.dev/coxswain/internal/status"
)

func TestJudge(t *testing.T) {
	t.Parallel()
	// v2 and v3 hold the generation judged, v1 does not.
	holds := func(v string) bool { return v == "v2" || v == "v3" }
	acked := func(node, v string) stream.ProxyState { return stream.ProxyState{NodeID: node, Acked: v} }
	nacked := func(node, acked, v, detail string) stream.ProxyState {
		return stream.ProxyState{NodeID: node, Acked: acked, Nacked: v, NackDetail: detail}
	}
	silent := stream.ProxyState{NodeID: "new", InFlight: "v2"}
	tests := []struct {
		name    string
		shared  bool
		proxies []stream.ProxyState
		want    status.AppliedState
		message string
	}{
		{"no stream on this replica is not judged", false, nil, status.AppliedUnknown, "no proxy of the Gateway streams from the controller replica"},
		{"every proxy acknowledged a version holding the generation", false, []stream.ProxyState{acked("a", "v2"), acked("b", "v3")}, status.AppliedYes, ""},
		{"a proxy that acknowledged an older version is waited for", false, []stream.ProxyState{acked("a", "v2"), acked("b", "v1")}, status.AppliedPending, "1 of 2 did"},
		{"a proxy that refused a version holding the generation refuses it", false, []stream.ProxyState{acked("a", "v2"), nacked("b", "v1", "v2", "bad TLS key")}, status.AppliedRefused, "Proxy b () refused the snapshot v2 holding generation 7 and keeps serving the one it had: bad TLS key"},
		{"a proxy that refused from its first snapshot refuses it", false, []stream.ProxyState{nacked("a", "", "v3", "no")}, status.AppliedRefused, ": no"},
		{"a refusal of an older version is only waiting", false, []stream.ProxyState{nacked("a", "v1", "v1", "old")}, status.AppliedPending, "0 of 1 did"},
		{"a stream that answered nothing yet is not counted", false, []stream.ProxyState{acked("a", "v2"), silent}, status.AppliedYes, ""},
		{"a shared pool proxy's refusal does not show its error", true, []stream.ProxyState{nacked("a", "v1", "v2", "listener other/secret/443: bad key")}, status.AppliedRefused, "not shown here"},
		{"streams that all answered nothing yet are waited for", false, []stream.ProxyState{silent, silent}, status.AppliedPending, "the 2 connected proxies"},
		{"a version the ledger does not know is not applied", false, []stream.ProxyState{acked("a", "forgotten")}, status.AppliedPending, "0 of 1 did"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := judge(7, tt.shared, tt.proxies, holds)
			if tt.shared && strings.Contains(got.Message, "bad key") {
				t.Errorf("the shared pool's verdict copies the proxy's error: %q", got.Message)
			}
			if got.State != tt.want || !strings.Contains(got.Message, tt.message) {
				t.Errorf("judge = %+v, want state %d with a message containing %q", got, tt.want, tt.message)
			}
		})
	}
}

func gateway(ns, name string, uid types.UID, gen int64) *graph.Gateway {
	return &graph.Gateway{Source: &gwapiv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid, Generation: gen}}}
}

func TestLedgerHolds(t *testing.T) {
	t.Parallel()
	pool := cache.SharedPool()
	key := types.NamespacedName{Namespace: "prod", Name: "web"}
	var l ledger
	l.record(pool, "A", []*graph.Gateway{gateway("prod", "web", "u1", 1)})
	l.record(pool, "B", []*graph.Gateway{gateway("prod", "web", "u1", 2), gateway("prod", "api", "u2", 1)})
	tests := []struct {
		name    string
		version string
		uid     types.UID
		gen     int64
		want    bool
	}{
		{"a version holds the generation it was compiled from", "A", "u1", 1, true},
		{"a version does not hold a later generation", "A", "u1", 2, false},
		{"a later version holds an earlier generation", "B", "u1", 1, true},
		{"a version does not hold another object of the same name", "B", "u9", 1, false},
		{"an unknown version holds nothing", "C", "u1", 1, false},
		{"no version holds nothing", "", "u1", 1, false},
	}
	for _, tt := range tests {
		if got := l.holds(pool, tt.version, key, tt.uid, tt.gen); got != tt.want {
			t.Errorf("%s: holds(%s, gen %d) = %v, want %v", tt.name, tt.version, tt.gen, got, tt.want)
		}
	}
	if l.holds(cache.Gateway("prod", "web"), "A", key, "u1", 1) {
		t.Error("another scope's ledger answered")
	}

	// Content that comes back (A again) holds what the rebuild that compiled it saw.
	l.record(pool, "A", []*graph.Gateway{gateway("prod", "web", "u1", 3)})
	if !l.holds(pool, "A", key, "u1", 3) {
		t.Error("a version published again does not hold the generation it was compiled from the second time")
	}
	l.forget(pool)
	if l.holds(pool, "A", key, "u1", 1) {
		t.Error("a forgotten scope still answers")
	}
}

// Tests that the ledger keeps the versions from the oldest one a live stream holds (all of them
// behind a stream holding one it forgot), only the current one when no stream holds any, and
// never more than maxLedgerVersions.
func TestLedgerPrunesVersionsNoStreamHolds(t *testing.T) {
	t.Parallel()
	pool := cache.SharedPool()
	var l ledger
	for _, v := range []string{"v1", "v2", "v3", "v4"} {
		l.record(pool, v, nil)
	}
	l.prune(pool, []stream.ProxyState{{Acked: "unknown"}})
	if got := l.versions(pool); got != 4 {
		t.Errorf("kept %d versions behind a stream holding one older than all, want the 4", got)
	}
	l.prune(pool, []stream.ProxyState{{Acked: "v4"}, {Acked: "v2", InFlight: "v4"}})
	if got := l.versions(pool); got != 3 {
		t.Errorf("kept %d versions, want v2, v3 and v4", got)
	}
	l.prune(pool, []stream.ProxyState{{Nacked: "v3"}})
	if got := l.versions(pool); got != 2 {
		t.Errorf("kept %d versions, want v3 and v4", got)
	}
	l.prune(pool, nil)
	if got := l.versions(pool); got != 1 {
		t.Errorf("kept %d versions, want only the current", got)
	}
	l.prune(cache.Gateway("prod", "none"), nil) // a scope never recorded

	// However old the version a stream holds, no more than maxLedgerVersions stay.
	for i := range 2 * maxLedgerVersions {
		l.record(pool, fmt.Sprint("w", i), nil)
		l.prune(pool, []stream.ProxyState{{Acked: "w0"}})
	}
	if got := l.versions(pool); got != maxLedgerVersions {
		t.Errorf("kept %d versions behind a lagging stream, want %d", got, maxLedgerVersions)
	}
}

// Tests that the pipeline records each version it publishes, an unchanged scope included,
// with the generations of the Gateways it serves, so that Applied turns ACKs into a verdict.
func TestPipelineJudgesFromTheVersionsItPublished(t *testing.T) {
	t.Parallel()
	var proxies []stream.ProxyState
	p := &Pipeline{
		Cache: cache.New(nil), Authority: scopeauth.New(), IsLeader: func() bool { return false },
		Proxies: func(cache.Scope) []stream.ProxyState { return proxies },
	}
	web := cache.Gateway("prod", "web")
	key := types.NamespacedName{Namespace: "prod", Name: "web"}
	withGeneration := func(gen string) string {
		return strings.Replace(world, "metadata: {name: web, namespace: prod}", "metadata: {name: web, namespace: prod, uid: u1, generation: "+gen+"}", 1)
	}
	if _, err := p.Rebuild(context.Background(), input(t, withGeneration("1"))); err != nil {
		t.Fatal(err)
	}
	first := p.Cache.Get(web).Version()
	proxies = []stream.ProxyState{{NodeID: "a", Acked: first}}
	if got := p.Applied(web, key, "u1", 1); got.State != status.AppliedYes {
		t.Fatalf("an ACK of the published version judged %+v", got)
	}

	// A generation that compiles to the same content: the version stays, and holds it.
	if _, err := p.Rebuild(context.Background(), input(t, withGeneration("2"))); err != nil {
		t.Fatal(err)
	}
	if p.Cache.Get(web).Version() != first {
		t.Fatal("the version changed with no content change")
	}
	if got := p.Applied(web, key, "u1", 2); got.State != status.AppliedYes {
		t.Errorf("an unchanged version does not hold the new generation: %+v", got)
	}

	// A generation that changes the content waits for its ACK, and a NACK refuses it.
	changed := strings.Replace(withGeneration("3"), "port: 8080", "port: 8081", 1)
	if _, err := p.Rebuild(context.Background(), input(t, changed)); err != nil {
		t.Fatal(err)
	}
	second := p.Cache.Get(web).Version()
	if got := p.Applied(web, key, "u1", 3); got.State != status.AppliedPending {
		t.Errorf("generation 3 before its ACK judged %+v", got)
	}
	proxies = []stream.ProxyState{{NodeID: "a", Acked: first, Nacked: second, NackDetail: "port taken"}}
	if got := p.Applied(web, key, "u1", 3); got.State != status.AppliedRefused || !strings.HasSuffix(got.Message, "port taken") {
		t.Errorf("generation 3 NACKed judged %+v", got)
	}
	proxies = []stream.ProxyState{{NodeID: "a", Acked: second}}
	if got := p.Applied(web, key, "u1", 3); got.State != status.AppliedYes {
		t.Errorf("generation 3 ACKed judged %+v", got)
	}
	if got := (&Pipeline{}).Applied(web, key, "u1", 3); got.State != status.AppliedUnknown {
		t.Errorf("a pipeline without Proxies judged %+v", got)
	}
}

// Tests that again writes the latest graph once more (the whole of it, with a writer that cannot
// judge scopes alone), and that calls while a write runs coalesce into one more write.
func TestStatusLoopWritesAgainOnAnswers(t *testing.T) {
	t.Parallel()
	w := &gatedWriter{gate: make(chan struct{})}
	l := newStatusLoop(w)
	web := cache.Gateway("prod", "web")
	l.again(web) // nothing written yet: nothing to write again
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go l.run(ctx)
	g := &graph.Graph{}
	l.offer(nil, g)
	waitFor(t, "the first write starts", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.busy && l.next == nil
	})
	l.again(web)
	l.again(web)
	w.gate <- struct{}{} // the first write
	w.gate <- struct{}{} // the one write again
	waitFor(t, "the loop settles", func() bool { return isIdle(l) })
	if got := w.written(); len(got) != 2 || got[1] != g {
		t.Fatalf("wrote %v, want the graph twice", got)
	}
}
