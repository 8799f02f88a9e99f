package discoveryserver

import (
	"flag"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"coxswain.dev/coxswain/discovery/server/bootstrap"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/server/stream"
)

// Tests that the limit flags default to the listeners' defaults and set what they name.
func TestLimitFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want Limits
	}{
		{name: "no flag gives the listeners' defaults", want: Limits{
			MaxConnections: stream.DefaultMaxConnections, MaxConnectionsPerSource: stream.DefaultMaxConnectionsPerSource,
			BootstrapMaxConnections: bootstrap.DefaultMaxConnections, BootstrapMaxConnectionsPerSource: bootstrap.DefaultMaxConnectionsPerSource,
			BusyHandshakeTimeout: stream.DefaultBusyHandshakeTimeout, MaxInFlightBytesPerIdentity: stream.DefaultMaxInFlightBytesPerIdentity,
			MaxInlineBytes: cache.DefaultMaxInlineBytes, BootstrapMaxRenewalsPerIdentity: bootstrap.DefaultMaxRenewalsPerIdentity,
			BootstrapReservedConnections: bootstrap.DefaultReservedConnections,
		}},
		{name: "every flag sets its limit", args: []string{
			"--discovery-max-connections=10", "--discovery-max-connections-per-source=2",
			"--discovery-bootstrap-max-connections=8", "--discovery-bootstrap-max-connections-per-source=1",
			"--discovery-busy-handshake-timeout=1s", "--discovery-max-inflight-bytes-per-identity=4096",
			"--discovery-bootstrap-max-renewals-per-identity=2", "--discovery-max-inline-bytes=2048",
			"--discovery-bootstrap-reserved-connections=3",
		}, want: Limits{
			MaxConnections: 10, MaxConnectionsPerSource: 2, BootstrapMaxConnections: 8, BootstrapMaxConnectionsPerSource: 1,
			BusyHandshakeTimeout: time.Second, MaxInFlightBytesPerIdentity: 4096, BootstrapMaxRenewalsPerIdentity: 2,
			MaxInlineBytes: 2048, BootstrapReservedConnections: 3,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("operator", flag.ContinueOnError)
			got := RegisterLimitFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("limits (-want +got):\n%s", diff)
			}
		})
	}
}
