//go:build race

package telemetry

// raceEnabled reports a build with the race detector.
const raceEnabled = true
