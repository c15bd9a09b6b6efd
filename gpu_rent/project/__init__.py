"""The project folder: gpu-rent.vars, .env, seed.yml, ollama-models.yaml and .gpu-rent/. Never the network."""
