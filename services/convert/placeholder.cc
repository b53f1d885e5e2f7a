namespace zipmoe { int placeholder_convert = 0; }
