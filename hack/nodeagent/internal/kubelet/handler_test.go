package kubelet

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestParseLogQueryReadsTheParametersTheAPIServerForwards(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	q, err := parseLogQuery(url.Values{
		"follow": {"true"}, "previous": {"1"}, "timestamps": {"true"},
		"tailLines": {"5"}, "limitBytes": {"100"}, "sinceTime": {"2026-01-01T11:00:00Z"},
	}.Get, now)
	if err != nil {
		t.Fatal(err)
	}
	if !q.Follow || !q.previous || !q.Timestamps || q.Tail != 5 || q.LimitBytes != 100 || !q.Since.Equal(now.Add(-time.Hour)) {
		t.Errorf("parsed %+v", q)
	}
	q, err = parseLogQuery(url.Values{"sinceSeconds": {"60"}}.Get, now)
	if err != nil || !q.Since.Equal(now.Add(-time.Minute)) || q.Tail != -1 {
		t.Errorf("sinceSeconds=60: %+v, %v", q, err)
	}
}

func TestParseLogQueryRejectsBadValuesByName(t *testing.T) {
	t.Parallel()
	for query, want := range map[string]string{
		"follow=maybe":        "follow",
		"tailLines=-1":        "tailLines: must not be negative",
		"limitBytes=lots":     "limitBytes",
		"sinceTime=yesterday": "sinceTime",
		"sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z": "exclusive",
	} {
		values, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseLogQuery(values.Get, time.Now()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming %q", query, err, want)
		}
	}
}
