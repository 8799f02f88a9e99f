package conformance

import (
	"fmt"
	"os"
	"strings"

	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/yaml"
)

// Counts are the outcomes of one support level of one profile.
type Counts struct {
	Passed, Failed, Skipped uint32
	FailedTests             []string
}

// Summary is one profile's outcome in a report.
type Summary struct {
	Mode     string
	Profile  string
	Core     Counts
	Extended Counts
}

// ReadReport decodes the ConformanceReport the suite wrote at path, refusing unknown fields.
func ReadReport(path string) (*confv1.ConformanceReport, error) {
	data, err := os.ReadFile(path) //nolint:gosec // the report path the caller chose
	if err != nil {
		return nil, fmt.Errorf("read conformance report: %w", err)
	}
	var r confv1.ConformanceReport
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		return nil, fmt.Errorf("decode conformance report %s: %w", path, err)
	}
	if r.Kind != "ConformanceReport" {
		return nil, fmt.Errorf("decode conformance report %s: kind is %q, not ConformanceReport", path, r.Kind)
	}
	return &r, nil
}

// Summarize returns one Summary per profile of r, in the report's order.
func Summarize(r *confv1.ConformanceReport) []Summary {
	out := make([]Summary, 0, len(r.ProfileReports))
	for _, p := range r.ProfileReports {
		s := Summary{Mode: r.Mode, Profile: p.Name, Core: counts(p.Core)}
		if p.Extended != nil {
			s.Extended = counts(p.Extended.Status)
		}
		out = append(out, s)
	}
	return out
}

func counts(s confv1.Status) Counts {
	return Counts{Passed: s.Passed, Failed: s.Failed, Skipped: s.Skipped, FailedTests: s.FailedTests}
}

// Failed is how many tests of the profile failed, core and extended. Every test the suite runs
// is claimed: the core tests of the profile, and the extended tests whose features the class
// lists.
func (s Summary) Failed() uint32 { return s.Core.Failed + s.Extended.Failed }

// String is the summary line `make conformance` prints for the profile.
func (s Summary) String() string {
	line := fmt.Sprintf("conformance %s %s: core passed %d failed %d skipped %d; extended passed %d failed %d skipped %d",
		s.Mode, s.Profile, s.Core.Passed, s.Core.Failed, s.Core.Skipped, s.Extended.Passed, s.Extended.Failed, s.Extended.Skipped)
	if failed := append(append([]string(nil), s.Core.FailedTests...), s.Extended.FailedTests...); len(failed) > 0 {
		line += "; failed: " + strings.Join(failed, ", ")
	}
	return line
}
