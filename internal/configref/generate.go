package configref

//go:generate go run ./gen -root ../.. -o ../../docs/configuration.md
