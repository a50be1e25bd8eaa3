"""Performance: ``famlab bench`` against Hugging Face (``bench``), where a step's time goes (``breakdown``), device
peaks for MFU (``hardware``) and the CPU allocator setting (``allocator``). Training reads only ``hardware``.
"""
