package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

const (
	servicesNamespace = "agent-services"
	lbPool            = "10.245.0.0/24"
	saCA              = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// Tests that the agent's service proxy serves a ClusterIP Service (TCP, and UDP from the
// node) from the node and from a pod, follows endpoint changes, refuses connections once no endpoint is ready and stops
// serving a deleted Service; that LoadBalancer Services on the same port get distinct
// addresses of the pool in their status and serve on them; and that pods reach the API
// server through the kubernetes Service, 10.96.0.1:443.
func TestServicesProxyClusterIPAndLoadBalancer(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)
	ensureNamespace(ctx, t, c, servicesNamespace)
	services := c.client.CoreV1().Services(servicesNamespace)
	deployments := c.client.AppsV1().Deployments(servicesNamespace)
	if _, err := deployments.Create(ctx, webDeployment(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nobody := webService("nobody", corev1.ServiceTypeClusterIP, intstr.FromInt32(8080))
	nobody.Spec.Selector = map[string]string{"app": "nobody"}
	for _, svc := range []*corev1.Service{
		webService("web", corev1.ServiceTypeClusterIP, intstr.FromString("http")),
		webService("web-lb", corev1.ServiceTypeLoadBalancer, intstr.FromInt32(8080)),
		webService("web-lb2", corev1.ServiceTypeLoadBalancer, intstr.FromString("http")),
		nobody,
	} {
		if _, err := services.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first := waitWebPods(t, c, 1)[0]
	web := clusterAddr(t, c, "web")
	t.Logf("Service web is %s, its endpoint pod %s", web, first)

	poll(t, "the ClusterIP serving from the node", 30*time.Second, func() (bool, error) {
		got, err := fetch(ctx, "http://"+web+"/env?name=POD_NAME")
		return got == first, fmt.Errorf("got %q, %w", got, err)
	})
	host, _, _ := net.SplitHostPort(web)
	poll(t, "the ClusterIP's UDP port answering", 30*time.Second, func() (bool, error) {
		got, err := askUDP(ctx, net.JoinHostPort(host, "53"))
		return got == first, fmt.Errorf("got %q, %w", got, err)
	})
	t.Logf("the ClusterIP answers on TCP port 80 and UDP port 53")
	expectRefused(t, clusterAddr(t, c, "nobody"))

	lb1, lb2 := lbAddr(t, c, "web-lb"), lbAddr(t, c, "web-lb2")
	if lb1 == lb2 {
		t.Errorf("two LoadBalancer Services share the address %s", lb1)
	}
	for _, a := range []string{lb1, lb2} {
		poll(t, "the load-balancer address "+a+" serving", 30*time.Second, func() (bool, error) {
			got, err := fetch(ctx, "http://"+a+"/env?name=POD_NAME")
			return got == first, fmt.Errorf("got %q, %w", got, err)
		})
	}
	t.Logf("LoadBalancer Services web-lb and web-lb2 serve port 80 on %s and %s", lb1, lb2)

	checkFromPod(ctx, t, c, web, lb1, first)

	scale(ctx, t, c, 2)
	pods := waitWebPods(t, c, 2)
	poll(t, "connections spread over both endpoints", 30*time.Second, func() (bool, error) {
		seen := map[string]bool{}
		for range 6 {
			got, err := fetch(ctx, "http://"+web+"/env?name=POD_NAME")
			if err != nil {
				return false, err
			}
			seen[got] = true
		}
		return len(seen) == 2 && seen[pods[0]] && seen[pods[1]], fmt.Errorf("answers from %v, endpoints %v", seen, pods)
	})
	t.Logf("scaled to 2: answers come from both %v", pods)

	scale(ctx, t, c, 1)
	left := waitWebPods(t, c, 1)[0]
	if err := c.client.CoreV1().Pods(servicesNamespace).Delete(ctx, left, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next := waitWebPods(t, c, 1)[0] // the deleted pod is terminating until it is gone
	if next == left {
		t.Fatalf("pod %s still listed after its deletion", left)
	}
	poll(t, "traffic moved to the replacement pod "+next, 30*time.Second, func() (bool, error) {
		got, err := fetch(ctx, "http://"+web+"/env?name=POD_NAME")
		return got == next, fmt.Errorf("got %q, %w", got, err)
	})
	for range 5 {
		if got, err := fetch(ctx, "http://"+web+"/env?name=POD_NAME"); got != next {
			t.Errorf("after the endpoint change an answer came from %q (%v), want %s", got, err, next)
		}
	}
	t.Logf("deleted pod %s: traffic moved to %s", left, next)

	if err := services.Delete(ctx, "web-lb2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectRefused(t, lb2)
	if got, err := fetch(ctx, "http://"+lb1+"/env?name=POD_NAME"); got != next {
		t.Errorf("the other LoadBalancer Service answers %q (%v) after one was deleted", got, err)
	}
	t.Logf("deleted Service web-lb2: %s refuses, %s still serves", lb2, lb1)

	scale(ctx, t, c, 0)
	expectRefused(t, web)
	expectRefused(t, lb1)
	t.Logf("scaled to 0: %s and %s refuse connections", web, lb1)
	if err := deployments.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// checkFromPod starts a client pod and has it fetch through the ClusterIP, the load-balancer
// address, and the API server through the kubernetes Service with its ServiceAccount's CA.
func checkFromPod(ctx context.Context, t *testing.T, c *cluster, web, lb, want string) {
	t.Helper()
	client := barePod("client", corev1.RestartPolicyAlways)
	if _, err := c.client.CoreV1().Pods(servicesNamespace).Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ip string
	poll(t, "the client pod Ready", 60*time.Second, func() (bool, error) {
		p, err := c.client.CoreV1().Pods(servicesNamespace).Get(ctx, "client", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ip = p.Status.PodIP
		return ip != "" && podCondition(p, corev1.PodReady), errors.New("phase " + string(p.Status.Phase))
	})
	for _, target := range []string{web, lb} {
		if got := get(t, ip, "/fetch?url=http://"+target+"/env%3Fname%3DPOD_NAME"); got != want {
			t.Errorf("the client pod fetching through %s got %q, want %q", target, got, want)
		}
	}
	host, port := get(t, ip, "/env?name=KUBERNETES_SERVICE_HOST"), get(t, ip, "/env?name=KUBERNETES_SERVICE_PORT")
	if host != "10.96.0.1" || port != "443" {
		t.Errorf("the pod's KUBERNETES_SERVICE_HOST:PORT is %s:%s, want 10.96.0.1:443", host, port)
	}
	version := get(t, ip, "/fetch?ca="+saCA+"&url=https://10.96.0.1:443/version")
	if !strings.Contains(version, `"gitVersion"`) {
		t.Errorf("the API server's /version through 10.96.0.1:443 reads %q", version)
	}
	t.Logf("pod %s reached %s, %s and the API server on 10.96.0.1:443 (verified with its ServiceAccount CA)", ip, web, lb)
	if err := c.client.CoreV1().Pods(servicesNamespace).Delete(ctx, "client", metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

func webDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name: "server", Image: testImage, Args: []string{"-listen=:8080", "-udp=:8053"},
						Ports: []corev1.ContainerPort{
							{Name: "http", ContainerPort: 8080},
							{Name: "echo", ContainerPort: 8053, Protocol: corev1.ProtocolUDP},
						},
						Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"},
						}}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
}

func webService(name string, typ corev1.ServiceType, target intstr.IntOrString) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{
				{Name: "web", Port: 80, TargetPort: target},
				{Name: "echo", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromString("echo")},
			},
		},
	}
}

func scale(ctx context.Context, t *testing.T, c *cluster, replicas int32) {
	t.Helper()
	s, err := c.client.AppsV1().Deployments(servicesNamespace).GetScale(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Replicas = replicas
	if _, err := c.client.AppsV1().Deployments(servicesNamespace).UpdateScale(ctx, "web", s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitWebPods waits until exactly n pods of the web Deployment exist, all Ready and none
// terminating, and returns their names, sorted.
func waitWebPods(t *testing.T, c *cluster, n int) []string {
	t.Helper()
	var names []string
	poll(t, fmt.Sprintf("%d Ready web pods", n), 60*time.Second, func() (bool, error) {
		pods, err := c.client.CoreV1().Pods(servicesNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		names = names[:0]
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp != nil || !podCondition(p, corev1.PodReady) {
				return false, fmt.Errorf("pod %s not Ready or terminating", p.Name)
			}
			names = append(names, p.Name)
		}
		return len(names) == n, fmt.Errorf("pods %v", names)
	})
	slices.Sort(names)
	return names
}

// clusterAddr is the ClusterIP and port of a Service.
func clusterAddr(t *testing.T, c *cluster, name string) string {
	t.Helper()
	svc, err := c.client.CoreV1().Services(servicesNamespace).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil || !netip.MustParsePrefix("10.96.0.0/16").Contains(ip) {
		t.Fatalf("Service %s has ClusterIP %q, want one of 10.96.0.0/16", name, svc.Spec.ClusterIP)
	}
	return net.JoinHostPort(ip.String(), "80")
}

// lbAddr waits for the load-balancer address in a Service's status and returns it with port 80.
func lbAddr(t *testing.T, c *cluster, name string) string {
	t.Helper()
	var addr string
	poll(t, "a load-balancer address for "+name, 30*time.Second, func() (bool, error) {
		svc, err := c.client.CoreV1().Services(servicesNamespace).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		in := svc.Status.LoadBalancer.Ingress
		if len(in) != 1 {
			return false, fmt.Errorf("ingress %v", in)
		}
		ip, err := netip.ParseAddr(in[0].IP)
		if err != nil || !netip.MustParsePrefix(lbPool).Contains(ip) || ptr.Deref(in[0].IPMode, "") != corev1.LoadBalancerIPModeVIP {
			t.Fatalf("Service %s has ingress %+v, want one address of %s with ipMode VIP", name, in[0], lbPool)
		}
		addr = net.JoinHostPort(ip.String(), "80")
		return true, nil
	})
	return addr
}

// expectRefused waits until a connection to addr is refused.
func expectRefused(t *testing.T, addr string) {
	t.Helper()
	poll(t, addr+" refusing connections", 30*time.Second, func() (bool, error) {
		conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(t.Context(), "tcp", addr)
		if err == nil {
			_ = conn.Close()
			return false, errors.New("connected")
		}
		return errors.Is(err, syscall.ECONNREFUSED), err
	})
}

// fetch GETs url from inside the namespace and returns the body of a 200 answer.
func fetch(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return "", err
	}
	// A new connection per request, so that each one is balanced anew.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, body)
	}
	return string(body), nil
}

// Tests the load balancers the Gateway API conformance suite asks for: 20 LoadBalancer
// Services alive at once, each on ports 80, 443, 8080 and 8090, get 20 distinct addresses and
// serve every port; a restarted agent keeps the address of each (it reads them back from the
// status) and serves them again.
func TestServicesManyLoadBalancersSurviveAgentRestart(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)
	const ns, count = "agent-lbs", 20
	ensureNamespace(ctx, t, c, ns)
	d := webDeployment()
	d.Name = "many"
	d.Spec.Selector.MatchLabels = map[string]string{"app": "many"}
	d.Spec.Template.Labels = map[string]string{"app": "many"}
	if _, err := c.client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ports := []int32{80, 443, 8080, 8090}
	for i := range count {
		svc := webService(fmt.Sprintf("gw-%02d", i), corev1.ServiceTypeLoadBalancer, intstr.FromString("http"))
		svc.Spec.Selector = map[string]string{"app": "many"}
		svc.Spec.Ports = nil
		for _, p := range ports {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Port: p, TargetPort: intstr.FromString("http")})
		}
		if _, err := c.client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	addrs := func(count int) map[string]string {
		out := map[string]string{}
		poll(t, "an address for each of the Services", 60*time.Second, func() (bool, error) {
			list, err := c.client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			clear(out)
			for _, s := range list.Items {
				if in := s.Status.LoadBalancer.Ingress; len(in) == 1 && netip.MustParsePrefix(lbPool).Contains(netip.MustParseAddr(in[0].IP)) {
					out[s.Name] = in[0].IP
				}
			}
			return len(out) == count, fmt.Errorf("%d of %d have an address", len(out), count)
		})
		return out
	}
	serving := func(byName map[string]string) {
		poll(t, "every address serving every port", 60*time.Second, func() (bool, error) {
			for name, ip := range byName {
				for _, p := range ports {
					if got, err := fetch(ctx, fmt.Sprintf("http://%s:%d/healthz", ip, p)); got != "ok\n" {
						return false, fmt.Errorf("%s on %s:%d: %q %w", name, ip, p, got, err)
					}
				}
			}
			return true, nil
		})
	}
	before := addrs(count)
	distinct := map[string]bool{}
	for _, ip := range before {
		distinct[ip] = true
	}
	if len(distinct) != count {
		t.Fatalf("%d Services share %d addresses: %v", count, len(distinct), before)
	}
	serving(before)
	t.Logf("%d LoadBalancer Services serve ports %v on %d distinct addresses", count, ports, len(distinct))

	// The first five go: a restarted agent that did not read the addresses back from the
	// status would hand out the pool's first addresses again, to the others.
	for i := range 5 {
		name := fmt.Sprintf("gw-%02d", i)
		if err := c.client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(before, name)
	}
	if err := c.restartAgent(); err != nil {
		t.Fatal(err)
	}
	after := addrs(count - 5)
	for name, ip := range before {
		if after[name] != ip {
			t.Errorf("Service %s had %s before the agent restarted, %s after", name, ip, after[name])
		}
	}
	serving(after)
	t.Logf("after an agent restart every Service keeps its address and serves again")
	if err := c.client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Error(err)
	}
}

// askUDP sends a datagram to addr and returns the answer.
func askUDP(ctx context.Context, addr string) (string, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, "udp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("who")); err != nil {
		return "", err
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	return string(buf[:n]), err
}
