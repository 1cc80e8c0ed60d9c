//go:build !race

package mdlint

// raceBuild: see race_test.go.
const raceBuild = false
