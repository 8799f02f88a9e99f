package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"coxswain.dev/coxswain/hack/nodeagent/internal/controlplane"
)

const (
	nodeName      = "local-node"
	testImage     = "coxswain.dev/nodeagent-testserver:test"
	testNamespace = "agent-test"
	tokenAudience = "coxswain-test"
	greeting      = "hello from a ConfigMap"
)

// cluster is a control plane and a node agent, both inside the test's namespaces, shared by
// the tests of the package (the agent owns the namespace's only bridge).
type cluster struct {
	client   kubernetes.Interface
	dir      string
	cp       *controlplane.ControlPlane
	agent    *exec.Cmd
	done     chan error
	agentLog string
	// registry is the address of the registry serving registryName's images to the agent.
	registry     string
	stopRegistry func()
}

var (
	clusterOnce sync.Once
	shared      *cluster
	sharedErr   error
)

// getCluster starts the shared cluster on first use; the agent's log is printed when t fails.
func getCluster(t *testing.T) *cluster {
	t.Helper()
	clusterOnce.Do(func() { shared, sharedErr = startCluster(context.Background()) })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(shared.agentLog)
			t.Logf("agent log:\n%s", data)
		}
	})
	return shared
}

func startCluster(ctx context.Context) (*cluster, error) {
	dir, err := os.MkdirTemp("", "cluster-")
	if err != nil {
		return nil, err
	}
	cpLog, err := os.Create(filepath.Join(dir, "control-plane.log"))
	if err != nil {
		return nil, err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{
		// Bound to every address of the private namespace, so that the kubernetes Service's
		// endpoint, the advertised address, answers.
		Assets: os.Getenv(envAssets), Dir: dir, AdvertiseAddress: apiAddress, BindAddress: "0.0.0.0", Output: cpLog,
	})
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w (log in %s)", err, cpLog.Name())
	}
	c := &cluster{dir: dir, cp: cp, agentLog: filepath.Join(dir, "agent.log")}
	if c.client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return nil, errors.Join(err, cp.Stop())
	}
	images := filepath.Join(dir, "images")
	if err := os.WriteFile(images, []byte(testImage+" "+os.Getenv(envServer)+"\n"), 0o600); err != nil {
		return nil, errors.Join(err, cp.Stop())
	}
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	c.registry, c.stopRegistry = reg.Listener.Addr().String(), reg.Close
	if err := c.startAgent("--kubeconfig="+cp.Kubeconfig, "--node-name="+nodeName, "--images="+images,
		"--registry="+registryName+"="+c.registry,
		"--state-dir="+filepath.Join(dir, "state"), "--restart-backoff=500ms", "--lease-duration=20s", "-v",
		"--kubelet-client-ca="+cp.CAFile, "--dns-server="+os.Getenv(envCoreDNS)); err != nil {
		reg.Close()
		return nil, errors.Join(err, cp.Stop())
	}
	return c, nil
}

func (c *cluster) startAgent(args ...string) error {
	log, err := os.OpenFile(c.agentLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	c.agent = exec.Command(os.Getenv(envAgent), args...) //nolint:noctx // stopped by SIGTERM in stop, not killed by a context
	c.agent.Stdout, c.agent.Stderr = log, log
	c.agent.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.agent.Start(); err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	c.done = make(chan error, 1)
	go func() { c.done <- c.agent.Wait() }()
	return nil
}

// stopCluster stops the shared cluster, if it started: the agent with SIGTERM (which must
// stop its pods' processes and exit cleanly), then the control plane.
func stopCluster() error {
	if shared == nil {
		return nil
	}
	c := shared
	_ = c.agent.Process.Signal(syscall.SIGTERM)
	var agentErr error
	select {
	case agentErr = <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.agent.Process.Kill()
		agentErr = errors.New("agent did not stop within 30s of SIGTERM")
	}
	if agentErr != nil {
		agentErr = fmt.Errorf("agent: %w", agentErr)
	}
	if os.Getenv("COXSWAIN_NODEAGENT_TEST_LOG") != "" {
		data, _ := os.ReadFile(c.agentLog)
		fmt.Fprintf(os.Stderr, "agent log:\n%s", data)
	}
	c.stopRegistry()
	return errors.Join(agentErr, c.cp.Stop(), os.RemoveAll(c.dir))
}

// poll calls f until it reports done, failing the test with f's last error after timeout.
func poll(t *testing.T, what string, timeout time.Duration, f func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		done, err := f()
		if done {
			return
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s (last error: %v)", what, timeout, last)
}

// Tests that the agent registers a Ready Node with a Lease, runs a Deployment's pod as a
// chrooted process on its own address with its ConfigMap and projected token volumes, reports
// it Ready through its readiness probe, and on deletion stops the process and deletes the pod.
func TestAgentRunsADeployment(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)

	poll(t, "node Ready with a Lease", 30*time.Second, func() (bool, error) {
		node, err := c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if _, err := c.client.CoordinationV1().Leases("kube-node-lease").Get(ctx, nodeName, metav1.GetOptions{}); err != nil {
			return false, err
		}
		return nodeReady(node), fmt.Errorf("conditions %v", node.Status.Conditions)
	})

	_, err1 := c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}}, metav1.CreateOptions{})
	_, err2 := c.client.CoreV1().ConfigMaps(testNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "greeting"},
		Data:       map[string]string{"message": greeting},
	}, metav1.CreateOptions{})
	_, err3 := c.client.AppsV1().Deployments(testNamespace).Create(ctx, deployment(), metav1.CreateOptions{})
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}

	pod := waitReadyPod(t, c, "")
	for _, cond := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		if !podCondition(pod, cond) {
			t.Errorf("pod condition %s is not True: %v", cond, pod.Status.Conditions)
		}
	}
	cs := pod.Status.ContainerStatuses[0]
	if pod.Status.Phase != corev1.PodRunning || cs.State.Running == nil || cs.Started == nil || !*cs.Started {
		t.Errorf("pod phase %s, container state %+v, started %v; want Running and started (its startup probe passed)",
			pod.Status.Phase, cs.State, cs.Started)
	}
	t.Logf("pod %s bound to %s, IP %s, Ready", pod.Name, pod.Spec.NodeName, pod.Status.PodIP)
	ip := pod.Status.PodIP
	if !strings.HasPrefix(ip, "10.244.0.") {
		t.Errorf("pod IP %q is not on the bridge's range 10.244.0.0/24", ip)
	}

	if got := get(t, ip, "/file?path=/etc/greeting/message"); got != greeting {
		t.Errorf("the ConfigMap volume reads %q in the pod, want %q", got, greeting)
	}
	if got := get(t, ip, "/env?name=POD_NAME"); got != pod.Name {
		t.Errorf("POD_NAME from a fieldRef is %q, want %q", got, pod.Name)
	}
	if got := get(t, ip, "/env?name=GREETING"); got != greeting {
		t.Errorf("GREETING from a configMapKeyRef is %q, want %q", got, greeting)
	}
	pid := get(t, ip, "/pid")
	checkIsolated(t, c, pod, pid)
	t.Logf("pod process %s serves on %s:8080 with the ConfigMap volume and env", pid, ip)
	checkToken(ctx, t, c, pod, get(t, ip, "/file?path=/var/run/secrets/coxswain-test/token"))

	t.Logf("the projected token reviews as %s", "system:serviceaccount:"+testNamespace+":default bound to the pod")
	checkPodToPod(ctx, t, c, ip)

	if err := c.client.CoreV1().Pods(testNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "deleted pod gone from the API", 30*time.Second, func() (bool, error) {
		_, err := c.client.CoreV1().Pods(testNamespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	if _, err := os.Stat("/proc/" + pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted pod's process %s still exists: %v", pid, err)
	}
	if _, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", net.JoinHostPort(ip, "8080")); err == nil {
		t.Errorf("the deleted pod's address %s still serves", ip)
	}
	t.Logf("deleted pod %s: process %s gone, pod object gone", pod.Name, pid)
	next := waitReadyPod(t, c, pod.Name)
	if got := get(t, next.Status.PodIP, "/healthz"); got != "ok\n" {
		t.Errorf("the replacement pod answers %q", got)
	}
}

func deployment() *appsv1.Deployment {
	labels := map[string]string{"app": "echo"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "echo"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](5),
					Containers: []corev1.Container{{
						Name:  "server",
						Image: testImage,
						Args:  []string{"-listen=:8080"},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						Env: []corev1.EnvVar{
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
							{Name: "GREETING", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
								LocalObjectReference: corev1.LocalObjectReference{Name: "greeting"}, Key: "message",
							}}},
						},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
							PeriodSeconds: 1,
						},
						StartupProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("http")}},
							PeriodSeconds: 1, FailureThreshold: 30,
						},
						LivenessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
							PeriodSeconds: 1, InitialDelaySeconds: 1,
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "greeting", MountPath: "/etc/greeting"},
							{Name: "token", MountPath: "/var/run/secrets/coxswain-test"},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "greeting", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "greeting"},
						}}},
						{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
							Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
								Audience: tokenAudience, ExpirationSeconds: ptr.To[int64](600), Path: "token",
							}}},
						}}},
					},
				},
			},
		},
	}
}

// waitReadyPod waits for a Ready pod of the Deployment other than skip, bound to the node.
func waitReadyPod(t *testing.T, c *cluster, skip string) *corev1.Pod {
	t.Helper()
	var ready *corev1.Pod
	poll(t, "a Ready pod of the Deployment", 60*time.Second, func() (bool, error) {
		pods, err := c.client.CoreV1().Pods(testNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app=echo"})
		if err != nil {
			return false, err
		}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			states = append(states, fmt.Sprintf("%s node=%q ip=%q phase=%s conditions=%v containers=%v",
				p.Name, p.Spec.NodeName, p.Status.PodIP, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses))
			if p.Name != skip && p.DeletionTimestamp == nil && p.Spec.NodeName == nodeName && p.Status.PodIP != "" && podCondition(p, corev1.PodReady) {
				ready = p
				return true, nil
			}
		}
		return false, fmt.Errorf("pods: %v", states)
	})
	return ready
}

// checkIsolated proves the pod's process runs chrooted into the pod's directory and in a
// network namespace other than the node's.
func checkIsolated(t *testing.T, c *cluster, pod *corev1.Pod, pid string) {
	t.Helper()
	root, err := os.Readlink("/proc/" + pid + "/root")
	if err != nil {
		t.Fatalf("read the pod process's root: %v", err)
	}
	if want := filepath.Join(c.dir, "state", "pods", string(pod.UID), "root"); root != want {
		t.Errorf("the pod's process has root %s, want its pod directory %s", root, want)
	}
	podNet, err1 := os.Readlink("/proc/" + pid + "/ns/net")
	nodeNet, err2 := os.Readlink("/proc/self/ns/net")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if podNet == nodeNet {
		t.Errorf("the pod's process shares the node's network namespace %s", nodeNet)
	}
}

// checkPodToPod starts a second pod and has it fetch from the first one's address across the
// bridge.
func checkPodToPod(ctx context.Context, t *testing.T, c *cluster, target string) {
	t.Helper()
	peer := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "peer", Labels: map[string]string{"app": "peer"}},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "server", Image: testImage, Args: []string{"-listen=:8080"},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	if _, err := c.client.CoreV1().Pods(testNamespace).Create(ctx, peer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip string
	poll(t, "the peer pod Ready", 60*time.Second, func() (bool, error) {
		p, err := c.client.CoreV1().Pods(testNamespace).Get(ctx, "peer", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ip = p.Status.PodIP
		return ip != "" && podCondition(p, corev1.PodReady), errors.New("phase " + string(p.Status.Phase))
	})
	if got := get(t, ip, "/fetch?url=http://"+net.JoinHostPort(target, "8080")+"/healthz"); got != "ok\n" {
		t.Errorf("pod %s fetching from pod %s got %q", ip, target, got)
	}
	t.Logf("pod %s reached pod %s across the bridge", ip, target)
	if err := c.client.CoreV1().Pods(testNamespace).Delete(ctx, "peer", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// checkToken reviews the token the pod read from its projected volume: valid for the
// projection's audience, of the pod's ServiceAccount, bound to the pod and the node.
func checkToken(ctx context.Context, t *testing.T, c *cluster, pod *corev1.Pod, token string) {
	t.Helper()
	review, err := c.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{tokenAudience}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := review.Status
	if !st.Authenticated {
		t.Fatalf("the pod's token does not review as authenticated: %q", st.Error)
	}
	if want := "system:serviceaccount:" + testNamespace + ":default"; st.User.Username != want {
		t.Errorf("token of %q, want %q", st.User.Username, want)
	}
	for key, want := range map[string]string{
		"authentication.kubernetes.io/pod-name":  pod.Name,
		"authentication.kubernetes.io/pod-uid":   string(pod.UID),
		"authentication.kubernetes.io/node-name": nodeName,
	} {
		if got := st.User.Extra[key]; len(got) != 1 || got[0] != want {
			t.Errorf("token extra %s = %v, want [%s]", key, got, want)
		}
	}
}

// get fetches path from the test server on ip, from inside the namespace, and fails the test
// unless it answers 200.
func get(t *testing.T, ip, path string) string {
	t.Helper()
	code, body := getPod(t, ip, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s from the pod: %d %s", path, code, body)
	}
	return body
}

// getPod fetches path from the test server on ip, from inside the namespace.
func getPod(t *testing.T, ip, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+net.JoinHostPort(ip, "8080")+path, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s from the pod: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s from the pod: %d, body: %v", path, resp.StatusCode, err)
	}
	return resp.StatusCode, string(body)
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Tests that the agent stops its pods' processes when it stops, and that a restarted agent
// runs the pods of its node again.
func TestAgentRestarts(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)
	ensureNamespace(ctx, t, c, lifecycleNamespace)
	if _, err := c.client.CoreV1().Pods(lifecycleNamespace).Create(ctx, barePod("survivor", corev1.RestartPolicyAlways), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var before *corev1.ContainerStatus
	poll(t, "the pod Ready", 60*time.Second, func() (bool, error) {
		cs, err := containerStatus(ctx, c, "survivor")
		before = cs
		return err == nil && cs.Ready, err
	})
	p, err := c.client.CoreV1().Pods(lifecycleNamespace).Get(ctx, "survivor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := get(t, p.Status.PodIP, "/pid")
	if err := c.restartAgent(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/" + pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pod's process %s outlived the agent: %v", pid, err)
	}
	poll(t, "the pod running again under the restarted agent", 60*time.Second, func() (bool, error) {
		cs, err := containerStatus(ctx, c, "survivor")
		if err != nil {
			return false, err
		}
		return cs.Ready && cs.ContainerID != before.ContainerID, fmt.Errorf("container %s ready=%v", cs.ContainerID, cs.Ready)
	})
	p, err = c.client.CoreV1().Pods(lifecycleNamespace).Get(ctx, "survivor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, p.Status.PodIP, "/pid"); got == pid {
		t.Errorf("the pod answers from its old process %s", pid)
	}
	deletePods(ctx, t, c, "survivor")
}

// restartAgent stops the agent with SIGTERM and starts it again with the same arguments,
// appending to its log.
func (c *cluster) restartAgent() error {
	_ = c.agent.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		if err != nil {
			return fmt.Errorf("agent exited with %w", err)
		}
	case <-time.After(30 * time.Second):
		return errors.New("agent did not stop within 30s of SIGTERM")
	}
	return c.startAgent(c.agent.Args[1:]...)
}
