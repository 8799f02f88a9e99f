package main

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

const lifecycleNamespace = "agent-lifecycle"

// Tests that a container exiting with an error is restarted with backoff and reports its last
// termination, and that a container failing its liveness probe is restarted.
func TestAgentRestartsContainers(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)
	ensureNamespace(ctx, t, c, lifecycleNamespace)
	crasher := barePod("crasher", corev1.RestartPolicyOnFailure, "-exit-after=1s", "-exit-code=3")
	unhealthy := barePod("unhealthy", corev1.RestartPolicyAlways, "-fail-healthz-after=2s")
	unhealthy.Spec.Containers[0].LivenessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
		PeriodSeconds: 1, FailureThreshold: 1, InitialDelaySeconds: 1,
	}
	for _, p := range []*corev1.Pod{crasher, unhealthy} {
		if _, err := c.client.CoreV1().Pods(lifecycleNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "the crashing container restarted twice with its exit code kept", 60*time.Second, func() (bool, error) {
		cs, err := containerStatus(ctx, c, "crasher")
		if err != nil {
			return false, err
		}
		last := cs.LastTerminationState.Terminated
		return cs.RestartCount >= 2 && last != nil && last.ExitCode == 3 && last.Reason == "Error",
			errors.New("restarts " + cs.String())
	})
	poll(t, "the container failing its liveness probe restarted", 60*time.Second, func() (bool, error) {
		cs, err := containerStatus(ctx, c, "unhealthy")
		if err != nil {
			return false, err
		}
		return cs.RestartCount >= 1, errors.New("status " + cs.String())
	})
	deletePods(ctx, t, c, "crasher", "unhealthy")
}

// Tests that an init container runs to completion before the container, that Secret,
// downward API and emptyDir volumes and secretKeyRef env reach the container, and that a container ignoring SIGTERM is killed once its grace period is over,
// not before, after which the pod goes away.
func TestAgentServesVolumesAndKillsAfterGrace(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)
	ensureNamespace(ctx, t, c, lifecycleNamespace)
	if _, err := c.client.CoreV1().Secrets(lifecycleNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "creds"},
		Data:       map[string][]byte{"password": []byte("s3cret")},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := barePod("stubborn", corev1.RestartPolicyAlways, "-ignore-sigterm")
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3)
	pod.Spec.InitContainers = []corev1.Container{{
		Name: "init", Image: testImage, Args: []string{"-listen=:8080", "-exit-after=200ms", "-exit-code=0"},
	}}
	pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password",
	}}}}
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
		{Name: "creds", MountPath: "/etc/creds"},
		{Name: "podinfo", MountPath: "/etc/podinfo"},
		{Name: "scratch", MountPath: "/scratch"},
	}
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
		{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		}}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	if _, err := c.client.CoreV1().Pods(lifecycleNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip string
	poll(t, "the pod Ready with an IP", 60*time.Second, func() (bool, error) {
		p, err := c.client.CoreV1().Pods(lifecycleNamespace).Get(ctx, "stubborn", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ip = p.Status.PodIP
		ready := ip != "" && podCondition(p, corev1.PodReady)
		if ready && (!podCondition(p, corev1.PodInitialized) || len(p.Status.InitContainerStatuses) != 1 ||
			p.Status.InitContainerStatuses[0].State.Terminated == nil || p.Status.InitContainerStatuses[0].State.Terminated.Reason != "Completed") {
			t.Fatalf("the pod is Ready but its init container did not complete first: %v %v", p.Status.Conditions, p.Status.InitContainerStatuses)
		}
		return ready, errors.New("phase " + string(p.Status.Phase))
	})
	for path, want := range map[string]string{
		"/file?path=/etc/creds/password": "s3cret",
		"/file?path=/etc/podinfo/name":   "stubborn",
		"/file?path=/etc/podinfo/labels": `app="stubborn"` + "\n",
		"/env?name=PASSWORD":             "s3cret",
	} {
		if got := get(t, ip, path); got != want {
			t.Errorf("GET %s = %q, want %q", path, got, want)
		}
	}
	get(t, ip, "/write?path=/scratch/note&data=kept")
	if got := get(t, ip, "/file?path=/scratch/note"); got != "kept" {
		t.Errorf("the emptyDir gave back %q, want what the pod wrote", got)
	}
	pid := get(t, ip, "/pid")

	deleted := time.Now()
	if err := c.client.CoreV1().Pods(lifecycleNamespace).Delete(ctx, "stubborn", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // half the grace period: SIGTERM was sent and ignored
	if _, err := os.Stat("/proc/" + pid); err != nil {
		t.Errorf("the process ignoring SIGTERM is gone before its grace period ended: %v", err)
	}
	poll(t, "the pod gone after its grace period", 30*time.Second, func() (bool, error) {
		_, err := c.client.CoreV1().Pods(lifecycleNamespace).Get(ctx, "stubborn", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	if took := time.Since(deleted); took < 3*time.Second {
		t.Errorf("the pod went away %s after its deletion, before its 3s grace period", took)
	}
	if _, err := os.Stat("/proc/" + pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed process %s still exists: %v", pid, err)
	}
}

// Tests that exec probes run the command inside the container's world: a probe of the
// container's own address passes, one of a closed port keeps its pod unready.
func TestAgentRunsExecProbes(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)
	ensureNamespace(ctx, t, c, lifecycleNamespace)
	pods := map[string]string{"exec-good": "http://127.0.0.1:8080/healthz", "exec-bad": "http://127.0.0.1:9/"}
	for name, url := range pods {
		p := barePod(name, corev1.RestartPolicyAlways)
		p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"testserver", "-get=" + url}}},
			PeriodSeconds: 1, TimeoutSeconds: 5,
		}
		if _, err := c.client.CoreV1().Pods(lifecycleNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "the pod with a passing exec probe Ready", 60*time.Second, func() (bool, error) {
		cs, err := containerStatus(ctx, c, "exec-good")
		return err == nil && cs.Ready, err
	})
	time.Sleep(3 * time.Second) // several periods of the failing probe
	cs, err := containerStatus(ctx, c, "exec-bad")
	if err != nil {
		t.Fatal(err)
	}
	if cs.State.Running == nil || cs.Ready {
		t.Errorf("the pod whose exec probe fails is %v, ready=%v; want running and not ready", cs.State, cs.Ready)
	}
	deletePods(ctx, t, c, "exec-good", "exec-bad")
}

func barePod(name string, policy corev1.RestartPolicy, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 policy,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "server", Image: testImage, Args: append([]string{"-listen=:8080"}, args...),
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/pid", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
}

func ensureNamespace(ctx context.Context, t *testing.T, c *cluster, name string) {
	t.Helper()
	_, err := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func containerStatus(ctx context.Context, c *cluster, pod string) (*corev1.ContainerStatus, error) {
	p, err := c.client.CoreV1().Pods(lifecycleNamespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if len(p.Status.ContainerStatuses) != 1 {
		return nil, errors.New("no container status yet")
	}
	return &p.Status.ContainerStatuses[0], nil
}

func deletePods(ctx context.Context, t *testing.T, c *cluster, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := c.client.CoreV1().Pods(lifecycleNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}
	poll(t, "the pods gone", 30*time.Second, func() (bool, error) {
		for _, name := range names {
			if _, err := c.client.CoreV1().Pods(lifecycleNamespace).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, errors.New(name + " still there: " + strings.TrimSpace(errString(err)))
			}
		}
		return true, nil
	})
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// Tests that a pod whose name is longer than a hostname may be (as the pods of a Deployment
// named after a 253-character Gateway are) runs, with its name cut to 63 characters and its
// trailing '-' trimmed as its hostname, in its UTS namespace, HOSTNAME and /etc/hosts alike.
func TestAgentCutsALongPodNameToAHostname(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)
	ensureNamespace(ctx, t, c, lifecycleNamespace)
	name := strings.Repeat("g", 62) + "-" + strings.Repeat("a", 184) + "-x7k2q"
	want := strings.Repeat("g", 62)
	p := barePod(name, corev1.RestartPolicyAlways, "-udp=:9090")
	p.Labels = map[string]string{"app": "long-name"} // a label value has at most 63 characters
	if _, err := c.client.CoreV1().Pods(lifecycleNamespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ip := waitPodReady(t, c, lifecycleNamespace, name, 0)
	got, err := askUDP(ctx, net.JoinHostPort(ip, "9090"))
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("the pod's hostname is %q, want %q", got, want)
	}
	if got := get(t, ip, "/env?name=HOSTNAME"); got != want {
		t.Errorf("HOSTNAME is %q, want %q", got, want)
	}
	if hosts := get(t, ip, "/file?path=/etc/hosts"); !strings.Contains(hosts, ip+"\t"+want+"\n") {
		t.Errorf("/etc/hosts does not name %s %s:\n%s", ip, want, hosts)
	}
	deletePods(ctx, t, c, name)
}
