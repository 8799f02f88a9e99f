package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/rebuild"
)

// histogram returns the series of the histogram name whose only label has value, or nil.
func (h *gatewayAPI) histogram(name, value string) *dto.Histogram {
	h.t.Helper()
	families, err := h.metrics.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == value {
				return m.GetHistogram()
			}
		}
	}
	return nil
}

// Tests that the pipeline's metrics move on a real cluster: a rebuild triggered by HTTPRoute
// edits alone is counted under trigger HTTPRoute, and the new shared pool snapshot it publishes
// is measured.
func TestRebuildMetricsFollowTheirTrigger(t *testing.T) {
	ns := newNamespace(t)
	h := startGatewayAPI(t, false, ns)
	class := h.newGatewayClass(ns, wellknown.GatewayControllerName)
	h.newBackend(ns, "echo", "10.1.2.3")
	h.create(newGateway(ns, "web", class))
	eventually(t, "the shared pool serves the Gateway", func() error {
		if keys, _ := h.keys(cache.SharedPool()); !slices.Contains(keys, "listener/"+ns+"/web/80") {
			return fmt.Errorf("keys %v", keys)
		}
		return nil
	})
	sizes := h.histogram("coxswain_rebuild_snapshot_bytes", "shared-pool")
	if sizes.GetSampleCount() == 0 || sizes.GetSampleSum() <= 0 {
		t.Fatalf("the shared pool snapshot was published unmeasured: %v", sizes)
	}
	before := sizes.GetSampleCount()

	h.create(newHTTPRoute(ns, "echo", []gwapiv1.ParentReference{parentRef(ns, "web")}, ns, "echo"))
	// The route's creation may coalesce with an event of the Gateway's that arrived after its
	// rebuild read the cache; each further edit of the route alone is a rebuild of its own.
	edits := 0
	eventually(t, "a rebuild counted under trigger HTTPRoute", func() error {
		if d := h.histogram("coxswain_rebuild_duration_seconds", "HTTPRoute"); d.GetSampleCount() > 0 && d.GetSampleSum() > 0 {
			return nil
		}
		edits++
		var route gwapiv1.HTTPRoute
		h.get(&route, ns, "echo")
		route.Spec.Hostnames = []gwapiv1.Hostname{gwapiv1.Hostname(fmt.Sprintf("edit-%d.example.com", edits))}
		if err := h.c.Update(context.Background(), &route); err != nil {
			return err
		}
		return fmt.Errorf("none after %d edits of the route", edits)
	})
	eventually(t, "the shared pool snapshot with the route measured", func() error {
		if n := h.histogram("coxswain_rebuild_snapshot_bytes", "shared-pool").GetSampleCount(); n <= before {
			return fmt.Errorf("%d shared pool snapshots measured, %d before the route", n, before)
		}
		return nil
	})
}

// Tests that a rebuild's log line names its trigger, and at V(1) the new version of every
// changed scope, and that an unchanged rebuild is logged only at V(1).
func TestRebuildLogLine(t *testing.T) {
	t.Parallel()
	changed := rebuild.Result{
		Scopes:   []cache.Scope{cache.Gateway("prod", "web"), cache.SharedPool()},
		Changed:  []cache.Scope{cache.SharedPool()},
		Versions: map[cache.Scope]string{cache.SharedPool(): "abc123"},
	}
	tests := []struct {
		name      string
		verbosity int
		res       rebuild.Result
		want      []string
	}{
		{
			name: "a change is logged at V(0) with its trigger", verbosity: 0, res: changed,
			want: []string{`"level"=0 "msg"="Rebuilt snapshots" "trigger"={"HTTPRoute"=2} "duration"="3ms" "scopes"=2 "changed"=1 ` +
				`"removed"=0 "failed"=0 "authorityChanged"=false "statusWritten"=0`},
		},
		{
			name: "at V(1) the line names the new versions", verbosity: 1, res: changed,
			want: []string{`"level"=0 "msg"="Rebuilt snapshots" "trigger"={"HTTPRoute"=2} "duration"="3ms" "scopes"=2 "changed"=1 ` +
				`"removed"=0 "failed"=0 "authorityChanged"=false "statusWritten"=0 "changedVersions"=["shared-pool@abc123"] "removedScopes"=[]`},
		},
		{name: "an unchanged world is not logged at V(0)", verbosity: 0, res: rebuild.Result{Scopes: changed.Scopes}},
		{
			name: "a failed scope gets an error line", verbosity: 0,
			res: rebuild.Result{Scopes: changed.Scopes, Failed: []rebuild.ScopeFailure{{Scope: cache.Gateway("prod", "web"), Err: errors.New("boom")}}},
			want: []string{
				`"msg"="Scope kept its last snapshot" "error"="boom" "scope"="gateway/prod/web"`,
				`"level"=0 "msg"="Rebuilt snapshots" "trigger"={"HTTPRoute"=2} "duration"="3ms" "scopes"=2 "changed"=0 ` +
					`"removed"=0 "failed"=1 "authorityChanged"=false "statusWritten"=0`,
			},
		},
		{
			name: "an unchanged world is logged at V(1)", verbosity: 1, res: rebuild.Result{Scopes: changed.Scopes},
			want: []string{`"level"=1 "msg"="Rebuilt snapshots" "trigger"={"HTTPRoute"=2} "duration"="3ms" "scopes"=2 "changed"=0 ` +
				`"removed"=0 "failed"=0 "authorityChanged"=false "statusWritten"=0 "changedVersions"=[] "removedScopes"=[]`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var lines []string
			logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: tt.verbosity})
			logRebuild(logger, rebuild.Trigger{"HTTPRoute": 2}, 3*time.Millisecond, tt.res)
			if diff := cmp.Diff(tt.want, lines); diff != "" {
				t.Errorf("log lines (-want +got):\n%s", diff)
			}
		})
	}
}
