//go:build tools

// Keeps crane's dependencies in go.mod and go.sum (it is built from the module cache).
package tools

import _ "github.com/google/go-containerregistry/cmd/crane"
