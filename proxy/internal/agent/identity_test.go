package agent_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/proxy/internal/agent"
)

// Tests that the agent subscribes only to the controller: a stream server holding a valid SVID
// of the same CA, but not the controller's name or SPIFFE ID, gets no Subscribe.
func TestStreamRefusesAServerThatIsNotTheController(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		configure  func(*agent.Config)
		proxyCert  bool
		wantReason string
	}{
		{
			name: "a server with a proxy's SVID and no DNS name is refused", proxyCert: true,
			wantReason: "verify stream server name",
		},
		{
			name: "a server with another SPIFFE ID than the configured controller's is refused",
			configure: func(cfg *agent.Config) {
				cfg.ControllerID = spiffeid.RequireFromString("spiffe://cluster.local/ns/coxswain-system/sa/other-controller")
			},
			wantReason: "peer not authorized",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newController(t)
			if tt.proxyCert {
				c.streamCert = c.pki.SVID(t, sharedID)
			}
			c.set(map[string]string{"route/a": "a"})
			c.start()
			configure := func(*agent.Config) {}
			if tt.configure != nil {
				configure = tt.configure
			}
			p := newProxy(t, c, configure)
			p.run()
			waitFor(t, "two refused streams", func() bool { return p.states.closes() >= 2 })
			code, body := p.readiness()
			if code != http.StatusServiceUnavailable || !strings.Contains(body, tt.wantReason) {
				t.Fatalf("readyz %d %q, want NotReady naming %q", code, body, tt.wantReason)
			}
			if _, streams := c.counts(); streams != 0 || p.store.Current() != nil {
				t.Fatalf("%d streams reached the server; routes %v", streams, p.store.Current())
			}
		})
	}

	t.Run("the controller's own ID is accepted", func(t *testing.T) {
		t.Parallel()
		c := newController(t)
		v := c.set(map[string]string{"route/a": "a"})
		c.start()
		p := newProxy(t, c, func(cfg *agent.Config) { cfg.ControllerID = spiffeid.RequireFromString(servertest.ControllerID) })
		p.run()
		p.waitVersion(v)
	})
}
