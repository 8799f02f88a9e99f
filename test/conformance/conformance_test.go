package conformance

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwconformance "sigs.k8s.io/gateway-api/conformance"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
)

var (
	modeFlag = flag.String("coxswain.mode", "",
		"run the Gateway API conformance suite against the cluster KUBECONFIG names, with every Gateway dedicated or shared; without it TestConformance skips")
	engineFlag = flag.String("coxswain.http1-engine", "",
		"HTTP/1.1 engine of the proxies (native or nethttp): the dedicated class's parameters and the shared pool's flag; empty leaves the proxies' default")
	classTimeout = flag.Duration("coxswain.class-timeout", 2*time.Minute,
		"how long to wait for the operator to accept the GatewayClass and list its features")
)

// The implementation written into the report unless -organization, -project, -url, -version or
// -contact say otherwise (hack/conformance.sh passes -version).
var implementation = struct{ organization, project, url, version, contact string }{
	organization: "coxswain.dev",
	project:      "coxswain",
	url:          "https://coxswain.dev/coxswain",
	version:      "dev",
	contact:      "https://coxswain.dev/coxswain",
}

// TestConformance runs the suite with the GATEWAY-HTTP, GATEWAY-GRPC, GATEWAY-TLS, GATEWAY-TCP
// and GATEWAY-UDP profiles on a GatewayClass of the mode -coxswain.mode names, with the features
// that class's status lists, and writes the suite's report to -report-output. It fails when any
// test it ran fails: every test it runs is claimed. Run it inside the cluster's namespaces: the
// suite dials the Gateways' addresses.
func TestConformance(t *testing.T) {
	if *modeFlag == "" {
		t.Skip("set -coxswain.mode=dedicated or shared (make conformance does) to run the suite against a cluster")
	}
	mode, err := ParseMode(*modeFlag)
	if err != nil {
		t.Fatal(err)
	}
	// DefaultOptions registers the Gateway API kinds in client-go's global scheme: this test
	// runs alone in its binary (hack/conformance.sh runs it with -test.run '^TestConformance$').
	opts := gwconformance.DefaultOptions(t)
	if len(opts.SupportedFeatures) > 0 || opts.EnableAllSupportedFeatures {
		t.Fatal("the features come from the GatewayClass status: leave -supported-features and -all-features unset " +
			"(-exempt-features and -skip-tests leave some out)")
	}
	if opts.ReportOutputPath == "" {
		t.Fatal("-report-output is required: the path the suite writes its report to")
	}
	setImplementationDefaults(&opts)
	setAddressDefaults(&opts)

	scheme, err := NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(opts.RestConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	engine, err := ParseEngine(*engineFlag)
	if err != nil {
		t.Fatal(err)
	}
	objs := mode.Objects(engine)
	if err := Ensure(t.Context(), c, objs); err != nil {
		t.Fatal(err)
	}
	if mode == Shared && engine != "" {
		if err := SetSharedPoolEngine(t.Context(), c, engine, *classTimeout); err != nil {
			t.Fatal(err)
		}
		t.Logf("shared pool %s/%s runs the %s engine", SharedPoolNamespace, SharedPoolName, engine)
	}
	if opts.CleanupBaseResources {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := Remove(ctx, c, objs); err != nil {
				t.Error(err)
			}
		})
	}
	supported, err := ClassFeatures(t.Context(), c, mode.ClassName(), *classTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GatewayClass %s lists %d features: %s", mode.ClassName(), len(supported), FeatureList(supported))

	opts.GatewayClassName = mode.ClassName()
	opts.Mode = string(mode)
	opts.SupportedFeatures = supported
	opts.ConformanceProfiles = []suite.ConformanceProfileName{
		suite.GatewayHTTPConformanceProfileName, suite.GatewayGRPCConformanceProfileName,
		suite.GatewayTLSConformanceProfileName, suite.GatewayTCPConformanceProfileName,
		suite.GatewayUDPConformanceProfileName,
	}

	// Cleanups run last first: this one runs after the suite's own, which writes the report.
	t.Cleanup(func() { summarize(t, opts.ReportOutputPath) })
	gwconformance.RunConformanceWithOptions(t, opts)
}

func setImplementationDefaults(opts *suite.ConformanceOptions) {
	impl := &opts.Implementation
	for _, f := range []struct {
		field *string
		def   string
	}{
		{&impl.Organization, implementation.organization},
		{&impl.Project, implementation.project},
		{&impl.URL, implementation.url},
		{&impl.Version, implementation.version},
	} {
		if *f.field == "" {
			*f.field = f.def
		}
	}
	if len(impl.Contact) == 0 {
		impl.Contact = []string{implementation.contact}
	}
}

// The addresses GatewayStaticAddresses requests unless -usable-address or -unusable-address say
// otherwise: the last address of the local cluster's load-balancer pool (10.245.0.0/24, handed
// out last by the node agent's allocator, so no Gateway of the suite holds it yet), and an
// address of TEST-NET-1 outside the pool, which the node agent never assigns.
const (
	usableAddress   = "10.245.0.254"
	unusableAddress = "192.0.2.1"
)

func setAddressDefaults(opts *suite.ConformanceOptions) {
	if len(opts.UsableNetworkAddresses) == 0 {
		opts.UsableNetworkAddresses = []gwapiv1.GatewaySpecAddress{{Type: ptr.To(gwapiv1.IPAddressType), Value: usableAddress}}
	}
	if len(opts.UnusableNetworkAddresses) == 0 {
		opts.UnusableNetworkAddresses = []gwapiv1.GatewaySpecAddress{{Type: ptr.To(gwapiv1.IPAddressType), Value: unusableAddress}}
	}
}

// summarize prints one line per profile of the report at path, to stdout so that it shows
// without -test.v, and fails the test when a claimed test failed.
func summarize(t *testing.T, path string) {
	t.Helper()
	r, err := ReadReport(path)
	if err != nil {
		t.Errorf("no conformance report: %v", err)
		return
	}
	summaries := Summarize(r)
	if len(summaries) == 0 {
		t.Errorf("the report %s holds no profile: the suite ran no test (a setup failure is above)", path)
	}
	for _, s := range summaries {
		fmt.Println(s) //nolint:forbidigo // the summary line hack/conformance.sh shows
		if s.Failed() > 0 {
			t.Errorf("%d claimed tests of %s failed", s.Failed(), s.Profile)
		}
	}
}
