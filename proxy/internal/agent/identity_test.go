package agent_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/server/servertest"
	"coxswain.dev/coxswain/proxy/internal/agent"
)

// Tests that the agent subscribes only to the controller: a stream server holding a valid SVID
// of the same CA, but not the controller's name or SPIFFE ID, gets no Subscribe.
func TestStreamRefusesAServerThatIsNotTheController(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// serverID, when set, is the SPIFFE ID of a certificate (no DNS name) the stream server
		// presents: a proxy SVID as the CA signs it when signed is set, else one that also
		// allows server auth.
		serverID   string
		signed     bool
		configure  func(*agent.Config)
		wantReason string
	}{
		{
			name: "a server with a proxy's SVID is refused: SVIDs are for clients only", serverID: sharedID, signed: true,
			wantReason: "incompatible key usage",
		},
		{
			name: "a server with a proxy's identity that may serve is refused", serverID: sharedID,
			wantReason: "peer not authorized",
		},
		{
			name: "a server with the controller's SPIFFE ID but not its DNS name is refused", serverID: servertest.ControllerID,
			wantReason: "verify stream server name",
		},
		{
			// The bootstrap refuses it already, so no token reaches it.
			name:       "the controller is refused when another controller identity is configured",
			configure:  func(cfg *agent.Config) { cfg.ControllerServiceAccount = "other-controller" },
			wantReason: "peer not authorized",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newController(t)
			switch {
			case tt.signed:
				c.streamCert = c.pki.SVID(t, tt.serverID)
			case tt.serverID != "":
				c.streamCert = pkitest.SVID(t, c.pki.CA, tt.serverID)
			}
			c.set(map[string]string{"route/a": "a"})
			c.start()
			configure := func(*agent.Config) {}
			if tt.configure != nil {
				configure = tt.configure
			}
			p := newProxy(t, c, configure)
			p.run()
			waitFor(t, "NotReady naming "+tt.wantReason, func() bool {
				code, body := p.readiness()
				return code == http.StatusServiceUnavailable && strings.Contains(body, tt.wantReason)
			})
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
		p := newProxy(t, c, func(cfg *agent.Config) {
			id := spiffeid.RequireFromString(servertest.ControllerID)
			cfg.ControllerNamespace, cfg.ControllerServiceAccount = "coxswain-system", "coxswain-controller"
			if !strings.HasSuffix(id.Path(), "/ns/"+cfg.ControllerNamespace+"/sa/"+cfg.ControllerServiceAccount) {
				t.Fatalf("the test controller is %s", id)
			}
		})
		p.run()
		p.waitVersion(v)
	})
}
