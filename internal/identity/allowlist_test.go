package identity

import (
	"testing"

	"coxswain.dev/coxswain/discovery/wellknown"
)

// Tests who may hold an SVID as dedicated identities come and go.
func TestAllowlist(t *testing.T) {
	t.Parallel()
	a := NewAllowlist(wellknown.InstallNamespace)
	check := func(ns, sa string, want bool) {
		t.Helper()
		if got := a.Allowed(ns, sa); got != want {
			t.Errorf("Allowed(%s, %s) = %t, want %t", ns, sa, got, want)
		}
	}
	check(wellknown.InstallNamespace, wellknown.SharedProxyServiceAccount, true)
	check("prod", wellknown.SharedProxyServiceAccount, false)
	check(wellknown.InstallNamespace, "coxswain-controller", false)
	check("prod", "gw-coxswain", false)

	a.Register("prod", "gw-coxswain")
	check("prod", "gw-coxswain", true)
	check("staging", "gw-coxswain", false)

	a.Unregister("prod", "gw-coxswain")
	check("prod", "gw-coxswain", false)

	a.Replace([]ServiceAccount{{Namespace: "prod", Name: "a-coxswain"}, {Namespace: "dev", Name: "b-coxswain"}})
	check("prod", "a-coxswain", true)
	check("dev", "b-coxswain", true)
	a.Replace(nil)
	check("prod", "a-coxswain", false)
	check(wellknown.InstallNamespace, wellknown.SharedProxyServiceAccount, true)
}

// Tests that the controller's own ServiceAccount never gets an SVID, even when a Gateway's
// dedicated name collides with it and someone registers it.
func TestAllowlistRefusesReservedIdentities(t *testing.T) {
	t.Parallel()
	controller := ServiceAccount{Namespace: wellknown.InstallNamespace, Name: wellknown.ControllerServiceAccount}
	a := NewAllowlist(wellknown.InstallNamespace, controller)
	a.Register(controller.Namespace, controller.Name)
	a.Replace([]ServiceAccount{controller, {Namespace: "prod", Name: wellknown.ControllerServiceAccount}})
	if a.Allowed(controller.Namespace, controller.Name) {
		t.Error("the controller's ServiceAccount may hold an SVID")
	}
	if !a.Allowed("prod", wellknown.ControllerServiceAccount) {
		t.Error("the same name in another namespace is refused")
	}
}
