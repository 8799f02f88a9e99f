package status

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwapiv1ac "sigs.k8s.io/gateway-api/applyconfiguration/apis/v1"
)

// FieldManager is the server-side apply field manager of the status the writer applies. It owns
// the GatewayClass, Gateway and ListenerSet status fields we compute, and nothing else: the
// conditions (keyed by type) and listeners (keyed by name) of other writers stay theirs.
const FieldManager = "coxswain-status"

// The functions below turn the status we own into apply configurations. Only the fields we set
// are in them: a zero observedGeneration, which the API server does not store, is left out so
// that what we apply compares equal to what ExtractXxxStatus reads back.

func conditionsApply(cs []metav1.Condition) []*metav1ac.ConditionApplyConfiguration {
	out := make([]*metav1ac.ConditionApplyConfiguration, 0, len(cs))
	for _, c := range cs {
		ac := metav1ac.Condition().
			WithType(c.Type).
			WithStatus(c.Status).
			WithReason(c.Reason).
			WithMessage(c.Message).
			WithLastTransitionTime(c.LastTransitionTime)
		if c.ObservedGeneration != 0 {
			ac.WithObservedGeneration(c.ObservedGeneration)
		}
		out = append(out, ac)
	}
	return out
}

func supportedKindsApply(kinds []gwapiv1.RouteGroupKind) []*gwapiv1ac.RouteGroupKindApplyConfiguration {
	out := make([]*gwapiv1ac.RouteGroupKindApplyConfiguration, 0, len(kinds))
	for _, k := range kinds {
		ac := gwapiv1ac.RouteGroupKind().WithKind(k.Kind)
		if k.Group != nil {
			ac.WithGroup(*k.Group)
		}
		out = append(out, ac)
	}
	return out
}

// gatewayStatusApply is the apply configuration of the Gateway status st.
func gatewayStatusApply(st gwapiv1.GatewayStatus) *gwapiv1ac.GatewayStatusApplyConfiguration {
	ac := gwapiv1ac.GatewayStatus().WithConditions(conditionsApply(st.Conditions)...)
	for _, a := range st.Addresses {
		addr := gwapiv1ac.GatewayStatusAddress().WithValue(a.Value)
		if a.Type != nil {
			addr.WithType(*a.Type)
		}
		ac.WithAddresses(addr)
	}
	for _, l := range st.Listeners {
		ac.WithListeners(gwapiv1ac.ListenerStatus().
			WithName(l.Name).
			WithSupportedKinds(supportedKindsApply(l.SupportedKinds)...).
			WithAttachedRoutes(l.AttachedRoutes).
			WithConditions(conditionsApply(l.Conditions)...))
	}
	if st.AttachedListenerSets != nil {
		ac.WithAttachedListenerSets(*st.AttachedListenerSets)
	}
	return ac
}

// listenerSetStatusApply is the apply configuration of the ListenerSet status st.
func listenerSetStatusApply(st gwapiv1.ListenerSetStatus) *gwapiv1ac.ListenerSetStatusApplyConfiguration {
	ac := gwapiv1ac.ListenerSetStatus().WithConditions(conditionsApply(st.Conditions)...)
	for _, l := range st.Listeners {
		ac.WithListeners(gwapiv1ac.ListenerEntryStatus().
			WithName(l.Name).
			WithSupportedKinds(supportedKindsApply(l.SupportedKinds)...).
			WithAttachedRoutes(l.AttachedRoutes).
			WithConditions(conditionsApply(l.Conditions)...))
	}
	return ac
}

// gatewayClassStatusApply is the apply configuration of the GatewayClass status st.
func gatewayClassStatusApply(st gwapiv1.GatewayClassStatus) *gwapiv1ac.GatewayClassStatusApplyConfiguration {
	ac := gwapiv1ac.GatewayClassStatus().WithConditions(conditionsApply(st.Conditions)...)
	for _, f := range st.SupportedFeatures {
		ac.WithSupportedFeatures(gwapiv1ac.SupportedFeature().WithName(f.Name))
	}
	return ac
}
