package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/test/e2e"
)

// What the cluster command tells a run started with hack/cluster.sh run --from: the manifests of
// the release to upgrade to (this tree's, pinned to its images) and both releases' images.
const (
	envUpgradeManifest = "COXSWAIN_UPGRADE_MANIFEST"
	envFromOperator    = "COXSWAIN_UPGRADE_FROM_OPERATOR_IMAGE"
	envFromProxy       = "COXSWAIN_UPGRADE_FROM_PROXY_IMAGE"
	envToOperator      = "COXSWAIN_UPGRADE_OPERATOR_IMAGE"
	envToProxy         = "COXSWAIN_UPGRADE_PROXY_IMAGE"
	// With hack/cluster.sh run --from --helm: the chart to upgrade to, helm, and the values
	// setting the chart's images to the new release's.
	envUpgradeChart     = "COXSWAIN_UPGRADE_CHART"
	envUpgradeHelm      = "COXSWAIN_UPGRADE_HELM"
	envUpgradeValues    = "COXSWAIN_UPGRADE_HELM_VALUES"
	upgradeDownloadSize = 2 << 20
	helmRelease         = "coxswain"
)

// TestUpgrade upgrades the release of hack/upgrade-from, installed by the cluster command, to
// this tree's, as docs/upgrade.md says: kubectl apply of the new manifests, CRDs first, or, on
// a cluster that installed the release's chart, our CRDs then helm upgrade. Under
// HTTP/1.1 (kept-alive and a connection per request), h2c and long downloads through a shared
// pool Gateway and a dedicated Gateway with two proxies, the operator, the shared pool and
// (rolled by the new operator) the dedicated proxy move to the new images, every old proxy pod
// drains, and not one request fails.
func TestUpgrade(t *testing.T) {
	manifest := os.Getenv(envUpgradeManifest)
	if manifest == "" && os.Getenv(envUpgradeChart) == "" {
		t.Skip(envUpgradeManifest + " is not set: this test runs on a cluster of hack/cluster.sh run --from (hack/e2e-cluster.sh --only upgrade)")
	}
	s := newSuite(t)
	ctx := t.Context()
	from := map[string]string{"operator": os.Getenv(envFromOperator), "proxy": os.Getenv(envFromProxy)}
	to := map[string]string{"operator": os.Getenv(envToOperator), "proxy": os.Getenv(envToProxy)}
	for _, m := range []map[string]string{from, to} {
		if m["operator"] == "" || m["proxy"] == "" {
			t.Fatalf("the cluster command gave no images of both releases: from %v, to %v", from, to)
		}
	}
	if from["operator"] == to["operator"] || from["proxy"] == to["proxy"] {
		t.Fatalf("the release upgraded from runs the images upgraded to (%v): nothing would be upgraded", to)
	}
	s.setUp(t)

	params := &v1alpha1.CoxswainGatewayParameters{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: paramsRolled},
		Spec:       v1alpha1.CoxswainGatewayParametersSpec{Replicas: ptr.To[int32](2)},
	}
	rolled := e2e.Gateway(namespace, gatewayRolled, className, listenerPort)
	rolled.Spec.Infrastructure = &gwapiv1.GatewayInfrastructure{ParametersRef: &gwapiv1.LocalParametersReference{
		Group: gwapiv1.Group(v1alpha1.GroupVersion.Group), Kind: "CoxswainGatewayParameters", Name: paramsRolled,
	}}
	for _, obj := range []client.Object{
		params, rolled, route(gatewayRolled, hostRolled),
		e2e.Gateway(namespace, gatewayShared, className, listenerPort), route(gatewayShared, hostShared),
	} {
		if err := s.ensure(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	controller := types.NamespacedName{Namespace: wellknown.InstallNamespace, Name: controllerName}
	shared := types.NamespacedName{Namespace: wellknown.InstallNamespace, Name: sharedPool}
	dedicated := types.NamespacedName{Namespace: namespace, Name: proxyName(gatewayRolled)}
	if err := e2e.Poll(ctx, 2*time.Minute, 250*time.Millisecond, s.rolledOut(dedicated, nil, nil)); err != nil {
		t.Fatalf("dedicated proxy before the upgrade: %v", err)
	}
	for key, image := range map[types.NamespacedName]string{controller: from["operator"], shared: from["proxy"], dedicated: from["proxy"]} {
		if err := s.runsImage(ctx, key, image); err != nil {
			t.Fatalf("before the upgrade: %v", err)
		}
	}

	var loads []*e2e.Load
	var downloads []*downloadLoop
	defer func() {
		for _, l := range loads {
			l.Stop() //nolint:errcheck // stopped and checked below; this covers a failure before it
		}
		for _, d := range downloads {
			d.stop()
		}
	}()
	for _, g := range []struct{ name, host string }{{gatewayShared, hostShared}, {gatewayRolled, hostRolled}} {
		addr, err := s.waitGatewayServing(ctx, g.name, g.host, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		path := "/upgrade"
		clients := []*e2e.Client{e2e.NewClient(addr, false), e2e.NewClient(addr, true), e2e.NewH2CClient(addr)}
		load := e2e.StartLoad(ctx, clients, g.host, path, 5*time.Millisecond, checkEcho(g.host, path))
		loads = append(loads, load)
		if err := waitMoreRequests(ctx, load, 100, 20*time.Second); err != nil {
			t.Fatalf("load through %s before the upgrade: %v", g.name, err)
		}
		downloads = append(downloads, startDownloads(ctx, addr, g.host))
	}
	old := map[types.NamespacedName]map[types.UID]bool{}
	for _, key := range []types.NamespacedName{controller, shared, dedicated} {
		uids, err := s.podUIDs(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		old[key] = uids
	}

	start := time.Now()
	if chart := os.Getenv(envUpgradeChart); chart != "" {
		if err := helmUpgrade(ctx, t, chart); err != nil {
			t.Fatal(err)
		}
		t.Logf("Upgraded the Helm release to the new chart (its CRDs first) in %s", time.Since(start).Round(100*time.Millisecond))
	} else {
		if err := applyUpgrade(ctx, t, manifest); err != nil {
			t.Fatal(err)
		}
		t.Logf("Applied the new release's manifests (CRDs first) in %s", time.Since(start).Round(100*time.Millisecond))
	}
	images := map[types.NamespacedName]string{controller: to["operator"], shared: to["proxy"], dedicated: to["proxy"]}
	var rollouts []*rollout
	for key, image := range images {
		r := s.newRollout(key, old[key])
		rolledOut := r.check
		r.check = func(ctx context.Context) error {
			if err := s.templateImage(ctx, key, image, key != controller); err != nil {
				return err
			}
			if err := rolledOut(ctx); err != nil {
				return err
			}
			return s.runsImage(ctx, key, image)
		}
		rollouts = append(rollouts, r)
	}
	if err := watchRollouts(ctx, start, 5*time.Minute, rollouts); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	for _, r := range rollouts {
		t.Logf("Deployment %s runs %s on every pod, every old pod gone %s after the apply", r.key, images[r.key], r.done.Round(100*time.Millisecond))
		if r.key != controller { // the operator's pods hold no client's connection
			r.checkDrained(t)
		}
	}
	for i, l := range loads {
		if err := waitMoreRequests(ctx, l, 100, 20*time.Second); err != nil {
			t.Errorf("load %d after the upgrade: %v", i, err)
		}
	}
	for i, d := range downloads {
		d.waitMore(ctx, t, 1, time.Minute)
		done, failures := d.stop()
		t.Logf("Downloads of %d bytes through %s: %d complete, %d failed", upgradeDownloadSize, []string{gatewayShared, gatewayRolled}[i], done, len(failures))
		for _, f := range failures {
			t.Errorf("download through %s: %v", []string{gatewayShared, gatewayRolled}[i], f)
		}
	}
	downloads = nil
	// The old proxies took the new operator's snapshots until they were replaced: they asked for
	// no route sets, and got their listeners with the routes inside (docs/upgrade.md#route-sets-routes-outside-their-listeners).
	acks, err := s.controllerMetric(ctx, "coxswain_discovery_snapshot_acks_total", nil)
	if err != nil {
		t.Fatal(err)
	}
	nacks, err := s.controllerMetric(ctx, "coxswain_discovery_snapshot_nacks_total", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Snapshots of the new operator: %.0f acknowledged, %.0f refused", acks, nacks)
	if acks == 0 || nacks != 0 {
		t.Errorf("the new operator's snapshots: %.0f acknowledged, %.0f refused; want some, and none refused", acks, nacks)
	}
	checkNoFailure(t, loads[0], "the upgrade of the shared pool (HTTP/1.1 kept-alive, a connection per request, h2c)")
	checkNoFailure(t, loads[1], "the upgrade of a dedicated proxy by the new operator (HTTP/1.1 kept-alive, a connection per request, h2c)")
	loads = nil
}

// applyUpgrade applies the new release's manifests as docs/upgrade.md says: the
// CustomResourceDefinitions first, until they are Established, then the rest.
func applyUpgrade(ctx context.Context, t *testing.T, manifest string) error {
	data, err := os.ReadFile(manifest) //nolint:gosec // the cluster command's file
	if err != nil {
		return err
	}
	var crds, rest [][]byte
	for doc := range bytes.SplitSeq(data, []byte("\n---\n")) {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return fmt.Errorf("%s: %w", manifest, err)
		}
		switch meta.Kind {
		case "":
		case "CustomResourceDefinition":
			crds = append(crds, doc)
		default:
			rest = append(rest, doc)
		}
	}
	if len(crds) == 0 || len(rest) == 0 {
		return fmt.Errorf("%s: %d CRDs and %d other objects, want both", manifest, len(crds), len(rest))
	}
	dir := t.TempDir()
	for i, step := range []struct {
		docs [][]byte
		wait []string
	}{
		{crds, []string{"wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"}},
		{rest, nil},
	} {
		file := filepath.Join(dir, fmt.Sprintf("%d.yaml", i))
		if err := os.WriteFile(file, bytes.Join(step.docs, []byte("\n---\n")), 0o600); err != nil {
			return err
		}
		for _, args := range [][]string{{"apply", "--server-side", "-f", file}, step.wait} {
			if args == nil {
				continue
			}
			out, err := exec.CommandContext(ctx, "kubectl", args...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
			}
		}
	}
	return nil
}

// helmUpgrade upgrades the Helm release to chart as docs/installation.md says: the chart's CRDs
// (which helm upgrade never touches) applied first, then helm upgrade --reuse-values with the
// new release's images.
func helmUpgrade(ctx context.Context, t *testing.T, chart string) error {
	helm := os.Getenv(envUpgradeHelm)
	dir := t.TempDir()
	env := append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"), "HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
	show := exec.CommandContext(ctx, helm, "show", "crds", chart)
	show.Env = env
	crds, err := show.Output()
	if err != nil {
		return fmt.Errorf("helm show crds %s: %w", chart, err)
	}
	// helm install wrote the CRDs as its own field manager: the apply takes them over, since helm
	// never upgrades them itself.
	apply := exec.CommandContext(ctx, "kubectl", "apply", "--server-side", "--force-conflicts", "-f", "-")
	apply.Stdin = bytes.NewReader(crds)
	if out, err := apply.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl apply of the chart's CRDs: %w\n%s", err, out)
	}
	args := append([]string{"upgrade", helmRelease, chart, "--namespace", wellknown.InstallNamespace, "--reuse-values"},
		strings.Fields(os.Getenv(envUpgradeValues))...)
	upgrade := exec.CommandContext(ctx, helm, args...)
	upgrade.Env = env
	if out, err := upgrade.CombinedOutput(); err != nil {
		return fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// templateImage checks the image of the Deployment's pod template and, for a proxy, that it
// rolls with maxUnavailable 0.
func (s *suite) templateImage(ctx context.Context, key types.NamespacedName, image string, proxy bool) error {
	var d appsv1.Deployment
	if err := s.client.Get(ctx, key, &d); err != nil {
		return err
	}
	if ru := d.Spec.Strategy.RollingUpdate; proxy && (ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0) {
		return fmt.Errorf("deployment %s rolls with %+v, want maxUnavailable 0", key, d.Spec.Strategy)
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Image != image {
			return fmt.Errorf("deployment %s: container %s has image %s, want %s", key, c.Name, c.Image, image)
		}
	}
	return nil
}

// runsImage checks that every running pod of the Deployment runs image, by the pod spec and by
// the digest the node reports pulling.
func (s *suite) runsImage(ctx context.Context, key types.NamespacedName, image string) error {
	pods, err := s.deploymentPods(ctx, key)
	if err != nil {
		return err
	}
	_, digest, _ := strings.Cut(image, "@")
	running := 0
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		running++
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Image != image || !strings.HasSuffix(cs.ImageID, "@"+digest) {
				return fmt.Errorf("pod %s of %s: container %s runs %s (%s), want %s", p.Name, key, cs.Name, cs.Image, cs.ImageID, image)
			}
		}
	}
	if running == 0 {
		return fmt.Errorf("deployment %s has no running pod", key)
	}
	return nil
}

// downloadLoop downloads a paced body of upgradeDownloadSize bytes through a Gateway, again and
// again, on two staggered connections so that one is always in flight, and checks every byte.
type downloadLoop struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	done     int
	failures []error
}

func startDownloads(ctx context.Context, addr, host string) *downloadLoop {
	ctx, cancel := context.WithCancel(ctx)
	d := &downloadLoop{cancel: cancel}
	// 64 chunks every 100 ms: 6.4 s, longer than the proxies' drain period.
	url := fmt.Sprintf("http://%s/download?bytes=%d&chunk=%d&interval=100ms", addr, upgradeDownloadSize, upgradeDownloadSize/64)
	for i := range 2 {
		d.wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(i) * 3200 * time.Millisecond):
			}
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
			for ctx.Err() == nil {
				err := downloadOnce(ctx, client, url, host)
				if ctx.Err() != nil {
					return // stopped mid-download: neither a success nor a failure
				}
				d.mu.Lock()
				if err != nil {
					d.failures = append(d.failures, err)
				} else {
					d.done++
				}
				d.mu.Unlock()
			}
		})
	}
	return d
}

func downloadOnce(ctx context.Context, client *http.Client, url, host string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return err
	}
	req.Host = host
	began := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close() //nolint:errcheck // read to the end below
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("after %d bytes and %s: %w", len(body), time.Since(began).Round(time.Millisecond), err)
	}
	if len(body) != upgradeDownloadSize {
		return fmt.Errorf("%d bytes, want %d", len(body), upgradeDownloadSize)
	}
	for i, b := range body {
		if b != byte(i%251) {
			return fmt.Errorf("byte %d is %d, want %d", i, b, i%251)
		}
	}
	return nil
}

// waitMore waits until n more downloads completed.
func (d *downloadLoop) waitMore(ctx context.Context, t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	d.mu.Lock()
	start := d.done
	d.mu.Unlock()
	if err := e2e.Poll(ctx, timeout, 100*time.Millisecond, func(context.Context) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.done < start+n {
			return fmt.Errorf("%d downloads completed since, want %d", d.done-start, n)
		}
		return nil
	}); err != nil {
		t.Errorf("downloads after the upgrade: %v", err)
	}
}

// stop ends the loop and returns the downloads completed and the failures.
func (d *downloadLoop) stop() (int, []error) {
	d.cancel()
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.done, d.failures
}
