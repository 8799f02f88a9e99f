package provision

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/graph"
)

// Where the proxy's volumes are mounted: the directories of wellknown.TokenPath and
// wellknown.TrustBundlePath.
const (
	tokenDir       = "/var/run/secrets/coxswain/discovery-token" //nolint:gosec // a mount path, not a credential
	trustBundleDir = "/var/run/secrets/coxswain/trust-bundle"
	tokenVolume    = "discovery-token"
	trustVolume    = "trust-bundle"
	snapshotVolume = "snapshot-cache"
	// snapshotLimit bounds the memory-backed volume of the last good snapshot.
	snapshotLimit  = "64Mi"
	tokenLifetime  = 3600 // seconds; the kubelet rotates the token at 80% of it
	containerName  = "proxy"
	healthPortName = "health"
	nonRootUser    = 65532 // distroless nonroot
	lowPortsSysctl = "net.ipv4.ip_unprivileged_port_start"
	portNamePrefix = "p"
	// readinessPeriod is how often the kubelet asks a proxy's /readyz (seconds). The default
	// 10 s would hold a Gateway's Programmed back by up to 10 s after its proxy has its first
	// snapshot; /readyz is an in-memory read. config/proxy/deployment.yaml (the shared pool)
	// uses the same period.
	readinessPeriod = 2
)

// The proxy's drain on SIGTERM (docs/upgrade.md), rendered into its flags and its pod's grace
// period from these constants alone, so that the two cannot disagree: the proxy fails
// readiness and serves on for DrainPeriod while the endpoints of its Services drop it, then
// gives the connections in flight ShutdownTimeout to finish. The kubelet kills it at
// TerminationGracePeriod: their sum and ShutdownMargin for the exit itself (the health
// server's shutdown, at most 1 s, and the close of the tunnels the timeout cut, at most 1 s).
// config/proxy/deployment.yaml (the shared pool) says the same; a test holds it to these.
const (
	DrainPeriod            = 5 * time.Second
	ShutdownTimeout        = 10 * time.Second
	ShutdownMargin         = 5 * time.Second
	TerminationGracePeriod = DrainPeriod + ShutdownTimeout + ShutdownMargin
)

// DrainArgs are the proxy flags of its drain, given explicitly so that the pod spec shows the
// timings its grace period was computed from.
func DrainArgs() []string {
	return []string{"--drain-period=" + DrainPeriod.String(), "--shutdown-timeout=" + ShutdownTimeout.String()}
}

// RollingUpdate is how a proxy Deployment rolls, so that an upgrade drops no request: no old
// pod stops before its replacement is ready (maxUnavailable 0), so the Gateway keeps every
// replica's capacity, and a single Gateway's only proxy is never gone; one pod is added at a
// time (maxSurge 1, not 25%): the least spare capacity a rollout can ask of the cluster, and
// one proxy's bootstrap at a time for the controller, for a proxy that is ready within
// seconds of starting (a bootstrap and a snapshot), so a rollout takes little longer.
func RollingUpdate() appsv1.DeploymentStrategy {
	return appsv1.DeploymentStrategy{
		Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			MaxSurge:       ptr.To(intstr.FromInt32(1)),
		},
	}
}

// Objects returns every object the model wants, in apply order.
func Objects(m Model) []Object {
	out := []Object{DesiredServiceAccount(m), DesiredDeployment(m), DesiredService(m)}
	if pdb := DesiredPodDisruptionBudget(m); pdb != nil {
		out = append(out, pdb)
	}
	return out
}

// DesiredServiceAccount is the proxy's identity. Its token is never automounted: the proxy
// reads only the projected token of audience coxswain-discovery, and holds no Kubernetes verbs.
func DesiredServiceAccount(m Model) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{
		TypeMeta:                     metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta:                   m.objectMeta(),
		AutomountServiceAccountToken: ptr.To(false),
	}
}

// portProtocol is the protocol of listener port p: UDP when udp holds it, else TCP.
func portProtocol(udp map[int32]bool, p int32) corev1.Protocol {
	if udp[p] {
		return corev1.ProtocolUDP
	}
	return corev1.ProtocolTCP
}

// DesiredService exposes the accepted listener ports of the Gateway; its address is the
// Gateway's.
func DesiredService(m Model) *corev1.Service {
	ports := make([]corev1.ServicePort, 0, len(m.Ports))
	for _, p := range m.Ports {
		ports = append(ports, corev1.ServicePort{
			Name: portName(p), Protocol: portProtocol(m.UDPPorts, p), Port: p, TargetPort: intstr.FromInt32(p),
		})
	}
	typ := m.serviceType()
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: m.objectMeta(),
		Spec: corev1.ServiceSpec{
			Type:           typ,
			Selector:       m.selector(),
			Ports:          ports,
			LoadBalancerIP: requestedIP(m.Gateway, typ),
		},
	}
}

// requestedIP is the address a LoadBalancer Service of gw asks its load balancer for: the first
// of spec.addresses, in spec.loadBalancerIP. That field is deprecated since Kubernetes 1.24 for
// lack of dual-stack, but every load balancer we know reads it (cloud providers, MetalLB,
// Cilium, kube-vip, the local cluster's node agent), where the annotations that replace it are
// each load balancer's own. A Service has one such address: the status writer keeps a Gateway
// that asks for more not Programmed (AddressNotUsable). Empty for other Service types, which
// refuse the field.
func requestedIP(gw *gwapiv1.Gateway, typ corev1.ServiceType) string {
	want := graph.RequestedAddresses(gw)
	if typ != corev1.ServiceTypeLoadBalancer || len(want) == 0 {
		return ""
	}
	return want[0]
}

// DesiredPodDisruptionBudget keeps all but one proxy pod available during voluntary
// disruptions; nil at one replica or fewer, where it would block node drains. It rules
// evictions (a node drain) only: a rollout's pods are replaced by the Deployment controller,
// which RollingUpdate bounds, and not evicted. An evicted pod drains as on any SIGTERM.
func DesiredPodDisruptionBudget(m Model) *policyv1.PodDisruptionBudget {
	if m.replicas() <= 1 {
		return nil
	}
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: m.objectMeta(),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: m.selector()},
		},
	}
}

// DesiredDeployment runs the proxy pods.
func DesiredDeployment(m Model) *appsv1.Deployment {
	meta := m.objectMeta()
	podLabels := m.labels()
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(m.replicas()),
			Selector: &metav1.LabelSelector{MatchLabels: m.selector()},
			Strategy: RollingUpdate(),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: meta.Annotations},
				Spec:       m.podSpec(),
			},
		},
	}
}

func (m Model) podSpec() corev1.PodSpec {
	return corev1.PodSpec{
		ServiceAccountName:            m.Name,
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		TerminationGracePeriodSeconds: ptr.To(int64(TerminationGracePeriod / time.Second)),
		SecurityContext:               m.podSecurityContext(),
		Containers:                    []corev1.Container{m.container()},
		Volumes:                       volumes(),
		NodeSelector:                  m.Params.NodeSelector,
		Tolerations:                   m.Params.Tolerations,
		Affinity:                      m.affinity(),
	}
}

func (m Model) podSecurityContext() *corev1.PodSecurityContext {
	sc := &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](nonRootUser),
		RunAsGroup:     ptr.To[int64](nonRootUser),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if m.needsLowPorts() {
		// A non-root process gets no effective capability from the container's added set, so
		// the pod's network namespace lets it bind the listener ports below 1024 (a namespaced,
		// safe sysctl).
		sc.Sysctls = []corev1.Sysctl{{Name: lowPortsSysctl, Value: strconv.Itoa(int(m.Ports[0]))}}
	}
	return sc
}

func (m Model) container() corev1.Container {
	ports := make([]corev1.ContainerPort, 0, len(m.Ports)+1)
	for _, p := range m.Ports {
		ports = append(ports, corev1.ContainerPort{Name: portName(p), ContainerPort: p, Protocol: portProtocol(m.UDPPorts, p)})
	}
	ports = append(ports, corev1.ContainerPort{Name: healthPortName, ContainerPort: m.HealthPort, Protocol: corev1.ProtocolTCP})
	caps := &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}
	if m.needsLowPorts() {
		caps.Add = []corev1.Capability{"NET_BIND_SERVICE"}
	}
	resources := m.resources()
	args := []string{
		"--discovery-endpoint=" + m.Defaults.DiscoveryEndpoint,
		"--bootstrap-endpoint=" + m.Defaults.BootstrapEndpoint,
		"--controller-namespace=" + m.Defaults.ControllerNamespace,
		"--controller-service-account=" + m.Defaults.ControllerServiceAccount,
		"--gateway-namespace=" + m.Gateway.Namespace,
		"--gateway-name=" + m.Gateway.Name,
		fmt.Sprintf("--health-address=:%d", m.HealthPort),
		"--snapshot-cache=" + wellknown.SnapshotCachePath,
	}
	args = append(args, DrainArgs()...)
	if e := m.http1Engine(); e != "" {
		args = append(args, wellknown.HTTP1EngineFlag+"="+string(e))
	}
	args = append(args, accessLogArgs(m.accessLog())...)
	args = append(args, tracingArgs(m.tracing())...)
	return corev1.Container{
		Name:  containerName,
		Image: m.image(),
		Args:  args,
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: fieldRef("metadata.name")},
			{Name: "POD_NAMESPACE", ValueFrom: fieldRef("metadata.namespace")},
			goMemLimit(resources),
		},
		Ports:          ports,
		Resources:      resources,
		ReadinessProbe: withPeriod(probe("/readyz"), readinessPeriod),
		LivenessProbe:  probe("/healthz"),
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             caps,
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: tokenVolume, MountPath: tokenDir, ReadOnly: true},
			{Name: trustVolume, MountPath: trustBundleDir, ReadOnly: true},
			{Name: snapshotVolume, MountPath: path.Dir(wellknown.SnapshotCachePath)},
		},
	}
}

// volumes are the proxy's only inputs from the cluster, both public or bound to it: the
// projected token and the trust bundle copy of its namespace; and a memory-backed volume where
// it keeps its last good snapshot across restarts of its container.
func volumes() []corev1.Volume {
	limit := resource.MustParse(snapshotLimit)
	return []corev1.Volume{
		{Name: tokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: wellknown.TokenAudience, ExpirationSeconds: ptr.To[int64](tokenLifetime), Path: "token",
			}}},
		}}},
		{Name: trustVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: wellknown.TrustBundleConfigMapName},
			Items:                []corev1.KeyToPath{{Key: wellknown.TrustBundleKey, Path: wellknown.TrustBundleKey}},
		}}},
		{Name: snapshotVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: &limit,
		}}},
	}
}

// affinity is the parameters', else a preference to spread the proxy's pods across nodes.
func (m Model) affinity() *corev1.Affinity {
	if m.Params.Affinity != nil {
		return m.Params.Affinity
	}
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: m.selector()},
				TopologyKey:   corev1.LabelHostname,
			},
		}},
	}}
}

func probe(path string) *corev1.Probe {
	return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
		Path: path, Port: intstr.FromString(healthPortName),
	}}}
}

func withPeriod(p *corev1.Probe, seconds int32) *corev1.Probe {
	p.PeriodSeconds = seconds
	return p
}

func fieldRef(path string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
}

// portName names a listener port ("p80"): at most 15 characters, with a letter.
func portName(p int32) string {
	return portNamePrefix + strconv.Itoa(int(p))
}

// tracingArgs are the proxy flags of t, none when tracing is off.
func tracingArgs(t *v1alpha1.Tracing) []string {
	if t == nil {
		return nil
	}
	args := []string{"--tracing-endpoint=" + t.Endpoint}
	if t.Protocol != nil {
		args = append(args, "--tracing-protocol="+string(*t.Protocol))
	}
	if f := t.SamplingFraction; f != nil {
		den := f.Denominator
		if den <= 0 {
			den = 100
		}
		args = append(args, "--tracing-sampling-ratio="+strconv.FormatFloat(float64(f.Numerator)/float64(den), 'g', -1, 64))
	}
	if t.TrustParentSampling != nil && *t.TrustParentSampling {
		args = append(args, "--tracing-trust-parent-sampling")
	}
	return args
}

// accessLogArgs are the proxy flags of an access log's format and fields, none for the
// proxy's defaults.
func accessLogArgs(a v1alpha1.AccessLog) []string {
	var args []string
	if a.Format != nil {
		args = append(args, "--access-log-format="+string(*a.Format))
	}
	if len(a.Fields) > 0 {
		fields := make([]string, len(a.Fields))
		for i, f := range a.Fields {
			fields[i] = string(f)
		}
		args = append(args, "--access-log-fields="+strings.Join(fields, ","))
	}
	return args
}
