package settings_test

import (
	"testing"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// Tests that the engines the API accepts are the values of the proxy's --http1-engine flag:
// the CRD's enum cannot name the constants, so this holds the two lists together.
func TestHTTP1EnginesAreTheProxyFlagsValues(t *testing.T) {
	for api, flag := range map[v1alpha1.HTTP1Engine]string{
		v1alpha1.HTTP1EngineNative:  wellknown.HTTP1EngineNative,
		v1alpha1.HTTP1EngineNetHTTP: wellknown.HTTP1EngineNetHTTP,
	} {
		if string(api) != flag {
			t.Errorf("API engine %q, proxy flag value %q", api, flag)
		}
	}
}
