package main

// The conformance tests register themselves from init() (one file per test in conformance/tests);
// this import puts them in the binary so `eppkit conformance` and `eppkit conformance catalogue`
// see them.
import _ "github.com/eppkit/eppkit/conformance/tests"
