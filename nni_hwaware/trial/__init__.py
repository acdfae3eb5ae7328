"""What runs inside an NNI trial: train one sampled network and report it with its hardware costs."""
