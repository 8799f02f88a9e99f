package conformance

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwconformance "sigs.k8s.io/gateway-api/conformance"
	"sigs.k8s.io/gateway-api/pkg/features"
)

func TestParseMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{in: "dedicated", want: Dedicated},
		{in: "shared", want: Shared},
		{in: "", wantErr: true},
		{in: "Dedicated", wantErr: true},
		{in: "all", wantErr: true},
	} {
		got, err := ParseMode(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q, error %t", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestClassNotReady(t *testing.T) {
	t.Parallel()
	accepted := func(status metav1.ConditionStatus, gen int64) []metav1.Condition {
		return []metav1.Condition{{Type: "Accepted", Status: status, ObservedGeneration: gen, Reason: "R", Message: "m"}}
	}
	someFeatures := []gwapiv1.SupportedFeature{{Name: "Gateway"}}
	for _, tc := range []struct {
		name   string
		status gwapiv1.GatewayClassStatus
		want   string
	}{
		{"a class without status waits for the operator", gwapiv1.GatewayClassStatus{}, "no Accepted condition"},
		{"a condition of an older generation waits", gwapiv1.GatewayClassStatus{Conditions: accepted(metav1.ConditionTrue, 1), SupportedFeatures: someFeatures}, "Accepted=True R at generation 1, the class is at 2: m"},
		{"a refused class says why", gwapiv1.GatewayClassStatus{Conditions: accepted(metav1.ConditionFalse, 2)}, "Accepted=False R at generation 2, the class is at 2: m"},
		{"an accepted class without features waits", gwapiv1.GatewayClassStatus{Conditions: accepted(metav1.ConditionTrue, 2)}, "supportedFeatures is empty"},
		{"an accepted class with features is ready", gwapiv1.GatewayClassStatus{Conditions: accepted(metav1.ConditionTrue, 2), SupportedFeatures: someFeatures}, ""},
	} {
		class := &gwapiv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: tc.status}
		got := classNotReady(class)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: classNotReady = %q, want it to hold %q", tc.name, got, tc.want)
		}
	}
}

func TestFeatureListIsSortedAndCommaSeparated(t *testing.T) {
	t.Parallel()
	got := FeatureList([]features.FeatureName{"HTTPRoute", "Gateway", "HTTPRouteHostRewrite"})
	if want := "Gateway,HTTPRoute,HTTPRouteHostRewrite"; got != want {
		t.Errorf("FeatureList = %q, want %q", got, want)
	}
}

func TestSummarizeReadsEveryProfileOfAReport(t *testing.T) {
	t.Parallel()
	r, err := ReadReport(filepath.Join("testdata", "report.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got := Summarize(r)
	want := []Summary{
		{
			Mode: "dedicated", Profile: "GATEWAY-HTTP",
			Core:     Counts{Passed: 31, Failed: 1, Skipped: 1, FailedTests: []string{"HTTPRouteExactPathMatching"}},
			Extended: Counts{Passed: 18, Failed: 2, FailedTests: []string{"HTTPRouteRequestMirror", "HTTPRouteSchemeRedirect"}},
		},
		{Mode: "dedicated", Profile: "GATEWAY-TLS", Core: Counts{Passed: 11}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Summarize (-want +got):\n%s", diff)
	}
	if got[0].Failed() != 3 || got[1].Failed() != 0 {
		t.Errorf("Failed() = %d and %d, want 3 and 0", got[0].Failed(), got[1].Failed())
	}
	for i, line := range []string{
		"conformance dedicated GATEWAY-HTTP: core passed 31 failed 1 skipped 1; extended passed 18 failed 2 skipped 0; " +
			"failed: HTTPRouteExactPathMatching, HTTPRouteRequestMirror, HTTPRouteSchemeRedirect",
		"conformance dedicated GATEWAY-TLS: core passed 11 failed 0 skipped 0; extended passed 0 failed 0 skipped 0",
	} {
		if got[i].String() != line {
			t.Errorf("line %d:\n got %s\nwant %s", i, got[i].String(), line)
		}
	}
}

func TestReadReportRefusesWhatIsNotAReport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown field": "kind: ConformanceReport\nprofilez: []\n",
		"another kind":  "kind: GatewayClass\n",
		"not YAML":      "{{{",
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadReport(path); err == nil {
			t.Errorf("%s: ReadReport accepted %q", name, body)
		}
	}
	if _, err := ReadReport(filepath.Join(dir, "missing")); err == nil {
		t.Error("ReadReport of a missing file returned no error")
	}
}

var imageLine = regexp.MustCompile(`^\s*(?:-\s*)?image:\s*"?([^"\s]+)"?\s*$`)

// Tests that images.txt maps every image the pinned suite's base manifests and test manifests
// run, and nothing else, to a binary under bin/conformance. The mesh manifests are left out:
// no mesh profile runs.
func TestImageMapCoversTheSuite(t *testing.T) {
	t.Parallel()
	used := map[string]bool{}
	err := fs.WalkDir(gwconformance.Manifests, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") || strings.HasPrefix(path, "mesh/") {
			return err
		}
		data, err := fs.ReadFile(gwconformance.Manifests, path)
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(data)) {
			if m := imageLine.FindStringSubmatch(line); m != nil {
				used[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(used) == 0 {
		t.Fatal("found no image in the suite's manifests")
	}
	mapped := readImageMap(t, "images.txt")
	for image := range used {
		if _, ok := mapped[image]; !ok {
			t.Errorf("images.txt does not map %s, which the suite runs", image)
		}
	}
	for image, bin := range mapped {
		if !used[image] {
			t.Errorf("images.txt maps %s, which the suite does not run", image)
		}
		if dir := filepath.Dir(bin); dir != "../../bin/conformance" {
			t.Errorf("images.txt maps %s to %s, outside bin/conformance", image, bin)
		}
	}
	bins := slices.Sorted(func(yield func(string) bool) {
		for _, b := range mapped {
			if !yield(filepath.Base(b)) {
				return
			}
		}
	})
	if want := []string{"echo-basic", "echo-basic"}; !slices.Equal(bins, want) {
		t.Errorf("images.txt binaries = %v, want %v (what hack/conformance.sh builds)", bins, want)
	}
}

func readImageMap(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() //nolint:errcheck // read only
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			t.Fatalf("images.txt: want `IMAGE PATH`, got %q", line)
		}
		out[fields[0]] = fields[1]
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
