package health_test

import dto "github.com/prometheus/client_model/go"

// gaugeValue returns the gauge of family name whose only label has value label, or -1.
func gaugeValue(families []*dto.MetricFamily, name, label string) float64 {
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}
