//go:build !unix

package main

import "time"

// processCPU is unknown here: CPU per saga reads 0.
func processCPU() time.Duration { return 0 }
