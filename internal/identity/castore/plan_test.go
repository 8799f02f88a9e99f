package castore

import (
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"coxswain.dev/coxswain/discovery/pki"
)

// Tests the Auto mode rotation decisions on fixed times.
func TestPlanAuto(t *testing.T) {
	t.Parallel()
	td := spiffeid.RequireTrustDomainFromString("cluster.local")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := policy{td: td, lifetime: 30 * time.Hour, overlap: time.Hour, leafBound: 2 * time.Hour}
	mk := func(td spiffeid.TrustDomain, at time.Time) *pki.CA {
		ca, err := pki.NewCA(td, p.lifetime, at)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	young := mk(td, t0)
	successor := mk(td, t0.Add(20*time.Hour))
	foreign := mk(spiffeid.RequireTrustDomainFromString("example.org"), t0)
	due := rotationDue(young)

	tests := []struct {
		name    string
		have    content
		now     time.Time
		changed bool
		check   func(t *testing.T, got content)
	}{
		{"a young CA is left alone", content{signing: young}, t0.Add(time.Hour), false, func(t *testing.T, got content) {
			if !sameCA(got.signing, young) || got.next != nil {
				t.Error("the plan changed a young CA")
			}
		}},
		{"a CA past two thirds of its life gets a successor that does not sign yet", content{signing: young}, due, true, func(t *testing.T, got content) {
			if !sameCA(got.signing, young) || got.next == nil || !got.nextActiveAt.Equal(due.Add(p.overlap)) {
				t.Errorf("signing kept %t, successor %v active at %s", sameCA(got.signing, young), got.next != nil, got.nextActiveAt)
			}
		}},
		{"a successor waits for its overlap to end", content{signing: young, next: successor, nextActiveAt: due.Add(p.overlap)}, due.Add(p.overlap - time.Second), false, nil},
		{"a successor takes over when its overlap ends and the old root stays for its leaves", content{signing: young, next: successor, nextActiveAt: due.Add(p.overlap)}, due.Add(p.overlap), true, func(t *testing.T, got content) {
			if !sameCA(got.signing, successor) || got.next != nil || len(got.retired) != 1 {
				t.Fatal("the successor did not take over")
			}
			if r := got.retired[0]; r.Certificate != young.Certificate() || !r.LastLeafExpiry.Equal(due.Add(p.overlap+p.leafBound)) {
				t.Errorf("retired %s until %s, want the old root until %s", r.Certificate.Subject, r.LastLeafExpiry, due.Add(p.overlap+p.leafBound))
			}
		}},
		{"an expired CA is replaced at once", content{signing: young}, young.Certificate().NotAfter.Add(time.Second), true, func(t *testing.T, got content) {
			if got.signing == nil || sameCA(got.signing, young) || got.next != nil {
				t.Error("the expired CA was not replaced")
			}
			if len(got.retired) != 1 || !got.retired[0].LastLeafExpiry.Equal(young.Certificate().NotAfter) {
				t.Error("the retired root's leaves outlive it")
			}
		}},
		{"a CA of another trust domain is replaced at once", content{signing: foreign}, t0.Add(time.Hour), true, func(t *testing.T, got content) {
			if got.signing == nil || sameCA(got.signing, foreign) || !permits(got.signing.Certificate(), td) {
				t.Error("the foreign CA was not replaced")
			}
		}},
		{"a successor of another trust domain is dropped", content{signing: young, next: foreign, nextActiveAt: t0}, t0.Add(time.Hour), true, func(t *testing.T, got content) {
			if got.next != nil || !sameCA(got.signing, young) {
				t.Error("the foreign successor was kept")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, changed, err := planAuto(tt.have, p, tt.now)
			if err != nil || changed != tt.changed {
				t.Fatalf("planAuto changed=%t err=%v; want changed=%t", changed, err, tt.changed)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}
