//go:build race

package mdlint

// raceBuild: the test binary is built with -race, so the snippets' export
// data is asked for with -race too, and comes from the archives the suite's
// other test binaries were built from.
const raceBuild = true
