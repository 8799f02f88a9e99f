// Package v1alpha1 holds the Coxswain operator's own API: CoxswainConfig, which configures the
// operator and its discovery channel, and CoxswainGatewayParameters, which a Gateway or
// GatewayClass references to ask for a dedicated proxy.
//
// +kubebuilder:object:generate=true
// +groupName=gateway.coxswain.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "gateway.coxswain.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this API with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this API to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&CoxswainConfig{}, &CoxswainConfigList{},
		&CoxswainGatewayParameters{}, &CoxswainGatewayParametersList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
