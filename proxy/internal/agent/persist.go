package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spiffe/go-spiffe/v2/svid/x509svid"
	"google.golang.org/protobuf/proto"

	discoveryv1 "coxswain.dev/coxswain/discovery/api/v1"
	"coxswain.dev/coxswain/discovery/client"
	"coxswain.dev/coxswain/discovery/server/cache"
	"coxswain.dev/coxswain/discovery/spiffe"
	"coxswain.dev/coxswain/discovery/tlsconfig"
	"coxswain.dev/coxswain/proxy/internal/resource"
)

// errRestored is the reason readiness gives while a restored snapshot serves.
var errRestored = errors.New("serving the snapshot kept from before the restart; the controller is not reached yet")

// persist keeps the applied set at SnapshotPath, as a full Snapshot message, and the chain of
// the SVID whose stream delivered it at SnapshotPath+".svid" (concatenated DER, public). The set
// holds listener private keys, so the path must be on a memory-backed volume.
func (a *Agent) persist(set *resource.Set, s *svid) {
	if a.cfg.SnapshotPath == "" || s == nil {
		return
	}
	var chain []byte
	for _, c := range s.certificate.Certificate {
		chain = append(chain, c...)
	}
	data, err := proto.Marshal(&discoveryv1.Snapshot{Version: set.Version(), Full: true, Resources: set.Resources()})
	if err == nil {
		err = writeAtomic(a.cfg.SnapshotPath+".svid", chain)
	}
	if err == nil {
		err = writeAtomic(a.cfg.SnapshotPath, data)
	}
	if err != nil {
		a.cfg.Logger.Info("Could not keep the applied snapshot", "path", a.cfg.SnapshotPath, "error", err.Error())
	}
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".snapshot-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// restore applies the kept snapshot, if any, before the first stream: only when its contents
// hash to its version and the SVID that received it chains to the mounted trust bundle (a root
// distrusted since then takes its snapshot with it). It reports whether one now serves.
func (a *Agent) restore(ctx context.Context) bool {
	if a.cfg.SnapshotPath == "" {
		return false
	}
	set, hashed, err := a.readKept()
	if err == nil {
		err = a.cfg.Applier.Apply(ctx, set)
	}
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			a.cfg.Logger.Info("Not restoring the kept snapshot", "path", a.cfg.SnapshotPath, "error", err.Error())
		}
		return false
	}
	a.applied, a.hashed = set, hashed
	a.cfg.Logger.Info("Restored the kept snapshot", "version", set.Version(), "resources", set.Len())
	a.cfg.Observer.SnapshotApplied(set.Version())
	a.cfg.Observer.StreamClosed(errRestored)
	return true
}

func (a *Agent) readKept() (*resource.Set, *cache.Snapshot, error) {
	data, err := client.ReadLimited(a.cfg.SnapshotPath, discoveryv1.MaxServerMessageBytes)
	if err != nil {
		return nil, nil, err
	}
	var snap discoveryv1.Snapshot
	if err := proto.Unmarshal(data, &snap); err != nil {
		return nil, nil, fmt.Errorf("decode: %w", err)
	}
	chain, err := client.ReadLimited(a.cfg.SnapshotPath+".svid", 64<<10)
	if err != nil {
		return nil, nil, fmt.Errorf("read the kept SVID chain: %w", err)
	}
	if err := a.checkKeptChain(chain); err != nil {
		return nil, nil, err
	}
	set, err := resource.NewSet(snap.GetVersion(), snap.GetResources())
	if err != nil {
		return nil, nil, err
	}
	hashed, err := verifyVersion(set, nil)
	if err != nil {
		return nil, nil, err
	}
	return set, hashed, nil
}

// checkKeptChain verifies the kept SVID chain with go-spiffe against the mounted bundle, for
// client auth, at the moment the SVID was valid (it may have expired while the proxy was down).
func (a *Agent) checkKeptChain(der []byte) error {
	chain, err := x509.ParseCertificates(der)
	if err != nil || len(chain) == 0 {
		return fmt.Errorf("kept SVID chain: %w", errors.Join(err, errors.New("no certificate")))
	}
	bundle, err := client.ReadBundle(a.cfg.TrustBundlePath)
	if err != nil {
		return err
	}
	source := tlsconfig.X509Source(tlsconfig.NewRotatingBundle(bundle))
	_, verified, err := spiffe.Verify(chain, source, x509svid.WithTime(chain[0].NotBefore))
	if err == nil {
		err = spiffe.CheckExtKeyUsage(verified, x509.ExtKeyUsageClientAuth)
	}
	if err != nil {
		return fmt.Errorf("the SVID that received the kept snapshot does not chain to the trust bundle: %w", err)
	}
	return nil
}
