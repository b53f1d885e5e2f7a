namespace zipmoe { int placeholder_synth = 0; }
