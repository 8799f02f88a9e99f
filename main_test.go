package main

import (
	"os"
	"testing"

	"k8s.io/client-go/rest"

	"coxswain.dev/coxswain/internal/testenv"
)

// cfg reaches the suite's kube-apiserver as an administrator.
var cfg *rest.Config

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(c *rest.Config) error {
		cfg = c
		return nil
	}))
}
