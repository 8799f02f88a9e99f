package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/go-spiffe/v2/svid/x509svid"

	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/tlsconfig"
)

// svid is an identity obtained by bootstrap. The private key lives only in certificate.
type svid struct {
	certificate *tls.Certificate
	bundle      *pki.Bundle
	id          spiffeid.ID
	// controller is the SPIFFE ID the stream server must present, in the SVID's trust domain.
	controller spiffeid.ID
	notAfter   time.Time
	// renewAt is when the agent fetches the next one.
	renewAt time.Time
}

// bootstrap exchanges the token for an SVID (discovery/client re-reads the token file and makes
// a fresh key every time; the controller is verified against the trust bundle of the moment, see
// trustBundle) and schedules its renewal. A renewal presents the
// current SVID, which puts it in the controller's renewal lane.
func (a *Agent) bootstrap(ctx context.Context) (*svid, error) {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.BootstrapTimeout)
	defer cancel()
	var renewing *tls.Certificate
	var last *pki.Bundle
	controller := tlsconfig.AuthorizeServiceAccount(a.cfg.ControllerNamespace, a.cfg.ControllerServiceAccount)
	if cur := a.current.Load(); cur != nil {
		controller, last = tlsconfig.AuthorizeID(cur.controller), cur.bundle
		if a.cfg.Clock.Now().Before(cur.notAfter) {
			renewing = cur.certificate
		}
	}
	issued, err := client.Bootstrap(ctx, client.BootstrapConfig{
		Controller:  controller,
		Renewing:    renewing,
		Address:     a.cfg.BootstrapAddress,
		ServerName:  a.cfg.ServerName,
		TokenPath:   a.cfg.TokenPath,
		Bundles:     a.trust(last),
		Scope:       a.cfg.Scope.proto(),
		DialOptions: a.cfg.DialOptions,
	})
	if err != nil {
		return nil, err
	}
	s, err := a.newSVID(issued)
	if err != nil {
		return nil, fmt.Errorf("bootstrap answer: %w", err)
	}
	return s, nil
}

// newSVID checks that the issued SVID names one workload and is still valid, and derives the
// controller's SPIFFE ID in its trust domain.
func (a *Agent) newSVID(issued *client.SVID) (*svid, error) {
	leaf := issued.Certificate.Leaf
	if leaf == nil {
		return nil, errors.New("the answer holds no SVID")
	}
	id, err := x509svid.IDFromCert(leaf)
	if err == nil {
		_, err = spiffe.PeerID(leaf, id.TrustDomain())
	}
	if err != nil {
		return nil, fmt.Errorf("SVID identity: %w", err)
	}
	controller, err := spiffe.ServiceAccountID(id.TrustDomain(), a.cfg.ControllerNamespace, a.cfg.ControllerServiceAccount)
	if err != nil {
		return nil, fmt.Errorf("controller identity: %w", err)
	}
	now := a.cfg.Clock.Now()
	if !issued.NotAfter.After(now) {
		return nil, fmt.Errorf("the SVID expired at %s, before %s", issued.NotAfter, now)
	}
	return &svid{
		certificate: issued.Certificate, bundle: issued.Bundle, id: id, controller: controller,
		notAfter: issued.NotAfter, renewAt: a.renewalTime(now, issued.NotAfter),
	}, nil
}

// renewalTime places the renewal at RenewFraction of the lifetime left now, ± RenewJitter, and
// no sooner than Backoff.Base, so that a controller handing out very short SVIDs is not hammered.
func (a *Agent) renewalTime(now, notAfter time.Time) time.Time {
	fraction := a.cfg.RenewFraction + a.cfg.RenewJitter*(2*a.cfg.Rand()-1)
	wait := time.Duration(float64(notAfter.Sub(now)) * fraction)
	return now.Add(max(wait, a.cfg.Backoff.Base))
}
