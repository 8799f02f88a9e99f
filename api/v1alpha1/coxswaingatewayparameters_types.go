package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CoxswainGatewayParametersSpec describes the dedicated proxy of a Gateway.
type CoxswainGatewayParametersSpec struct {
	// Replicas is the number of proxy pods; above one, a PodDisruptionBudget keeps at least one
	// available. Default: the CoxswainConfig proxy default.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// Resources are the proxy container's compute resources.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// Image overrides the proxy container image. The proxy runs as the Gateway's identity and
	// receives every key its Gateway names, so whoever writes these parameters is trusted with
	// those keys: the image is used when a GatewayClass's parametersRef names these parameters,
	// and for a Gateway's own spec.infrastructure.parametersRef only when the CoxswainConfig's
	// spec.proxy.allowedImages lists it; otherwise the proxy runs the default image and a Warning
	// event (ImageNotAllowed) on the Gateway says why.
	// +optional
	// +kubebuilder:validation:MinLength=1
	Image *string `json:"image,omitempty"`

	// ServiceType is the type of the proxy's Service. Default: the CoxswainConfig's
	// spec.proxy.serviceType, LoadBalancer when that is unset.
	// +optional
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	ServiceType *corev1.ServiceType `json:"serviceType,omitempty"`

	// HTTP1Engine is the HTTP/1.1 engine of the proxy: native or nethttp. Default: the
	// CoxswainConfig's spec.proxy.http1Engine, the proxy's own default when that is unset.
	// +optional
	HTTP1Engine *HTTP1Engine `json:"http1Engine,omitempty"`

	// AccessLog is what the proxy's access log writes; a field set here overrides the
	// CoxswainConfig's spec.proxy.accessLog field of the same name. Default: that, or the
	// proxy's own (JSON with every field).
	// +optional
	AccessLog *AccessLog `json:"accessLog,omitempty"`

	// Tracing sends a span per request of the proxy to an OpenTelemetry collector; set here it
	// replaces the CoxswainConfig's spec.proxy.tracing whole. The collector receives every
	// request's path, host and client address: the tracing is used when a GatewayClass's
	// parametersRef names these parameters, and for a Gateway's own
	// spec.infrastructure.parametersRef only when the CoxswainConfig's
	// spec.proxy.allowedTracingEndpoints admits its endpoint; otherwise the proxy traces as
	// spec.proxy.tracing says and a Warning event (TracingEndpointNotAllowed) on the Gateway
	// says why. Default: spec.proxy.tracing, or off.
	// +optional
	Tracing *Tracing `json:"tracing,omitempty"`

	// NodeSelector constrains the proxy pods to nodes with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations let the proxy pods run on tainted nodes. A toleration of the control-plane
	// taints (node-role.kubernetes.io/control-plane, node-role.kubernetes.io/master) or without
	// a key (which tolerates every taint) is left out, with a Warning event
	// (TolerationNotAllowed) on the Gateway.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Affinity is the proxy pods' scheduling affinity. Default: prefer spreading the pods of one
	// proxy across nodes.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// Labels are added to every object provisioned for the proxy.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Labels map[string]string `json:"labels,omitempty"`

	// Annotations are added to every object provisioned for the proxy.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Annotations map[string]string `json:"annotations,omitempty"`
}

// CoxswainGatewayParameters asks for a dedicated proxy. A Gateway's
// spec.infrastructure.parametersRef or a GatewayClass's spec.parametersRef points at it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=cxgwp
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Service Type",type=string,JSONPath=`.spec.serviceType`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CoxswainGatewayParameters struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec CoxswainGatewayParametersSpec `json:"spec,omitempty"`
}

// CoxswainGatewayParametersList is a list of CoxswainGatewayParameters.
//
// +kubebuilder:object:root=true
type CoxswainGatewayParametersList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CoxswainGatewayParameters `json:"items"`
}
